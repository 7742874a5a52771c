// The libc headers that declare every type named in symbols.def.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

// The wrappers treat the plain and the 64-bit forms as one, which holds on LP64 glibc targets.
static_assert(sizeof(struct stat) == sizeof(struct stat64));
static_assert(sizeof(struct dirent) == sizeof(struct dirent64));
static_assert(sizeof(struct statfs) == sizeof(struct statfs64));
static_assert(sizeof(struct statvfs) == sizeof(struct statvfs64));
static_assert(sizeof(off_t) == 8);
