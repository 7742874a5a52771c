// walk ROOT [stat] [THREADS] : getdents64 walk of a two-level tree (+ fstatat of every entry if "stat").
// THREADS>1 splits top-level directories among threads. Prints entries and time.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <time.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
struct d64 { unsigned long long ino; long long off; unsigned short reclen; unsigned char type; char name[]; };
static int dostat, nthr; static char** tops; static long ntop; static long total; static const char* root;
static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec + t.tv_nsec*1e-9; }
static long walkdir(int dfd){ char buf[1<<16]; long cnt = 0; long r;
  while ((r = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0)
    for (long o = 0; o < r; ) { struct d64* e = (void*)(buf+o); o += e->reclen;
      if (e->name[0]=='.' && (!e->name[1] || (e->name[1]=='.' && !e->name[2]))) continue;
      cnt++; if (dostat) { struct stat st; fstatat(dfd, e->name, &st, AT_SYMLINK_NOFOLLOW); } }
  return cnt; }
static void* work(void* a){ long id=(long)a, c=0; int rfd = open(root, O_RDONLY|O_DIRECTORY);
  for (long i=id;i<ntop;i+=nthr){ int d=openat(rfd,tops[i],O_RDONLY|O_DIRECTORY); if(d<0){perror(tops[i]);continue;} c+=walkdir(d); close(d);} 
  __sync_fetch_and_add(&total,c); close(rfd); return 0; }
int main(int argc,char**argv){ root=argv[1]; dostat = argc>2 && !strcmp(argv[2],"stat"); nthr = argc>3?atoi(argv[3]):1;
  double t0=now(); DIR* d=opendir(root); struct dirent* e; long cap=4096; tops=malloc(cap*sizeof*tops);
  while((e=readdir(d))) { if(e->d_name[0]=='.') continue; if(ntop==cap) tops=realloc(tops,(cap*=2)*sizeof*tops); tops[ntop++]=strdup(e->d_name);
    if (dostat) { struct stat st; fstatat(dirfd(d), e->d_name, &st, 0);} }
  closedir(d); pthread_t th[64]; for(long i=0;i<nthr;i++) pthread_create(&th[i],0,work,(void*)i); for(long i=0;i<nthr;i++) pthread_join(th[i],0);
  double t=now()-t0; printf("walk%s %s dirs=%ld entries=%ld s=%.3f us/entry=%.2f\n", dostat?"+stat":"", root, ntop, total, t, t*1e6/(total?total:1)); return 0; }
