// Status: formatting and errno mapping.
#include "common/status.h"

#include <cstring>

namespace fanstore {

Status Status::FromErrno(std::string_view context, int err) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status(Code::kNotFound, msg);
    case EACCES:
    case EPERM:
      return Status(Code::kPermission, msg);
    case ENOSPC:
    case EDQUOT:
      return Status(Code::kNoSpace, msg);
    case EEXIST:
      return Status(Code::kExists, msg);
    case EINVAL:
      return Status(Code::kInvalidArgument, msg);
    default:
      return Status(Code::kIOError, msg);
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return msg_;
}

int Status::ToErrno() const {
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kPermission:
      return EACCES;
    case Code::kNoSpace:
      return ENOSPC;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kUnsupported:
      return ENOTSUP;
    case Code::kTimeout:
      return ETIMEDOUT;
    case Code::kExists:
      return EEXIST;
    default:
      return EIO;
  }
}

Status Status::Prefixed(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += msg_;
  return Status(code_, msg);
}

}  // namespace fanstore
