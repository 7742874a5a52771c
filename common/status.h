// Status and Result<T>: the error type of FanStore's core code (after leveldb/kvrocks).
// OK is cheap (no allocation). Errors carry a code and a message that names the cause.
// errno is turned into a Status in exactly one place: Status::FromErrno.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fanstore {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,
    kCorruption,
    kIOError,
    kInvalidArgument,
    kUnsupported,
    kNoSpace,
    kPermission,
    kTimeout,
    kAborted,
    kExists
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status Unsupported(std::string_view msg) { return Status(Code::kUnsupported, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Permission(std::string_view msg) { return Status(Code::kPermission, msg); }
  static Status Timeout(std::string_view msg) { return Status(Code::kTimeout, msg); }
  static Status Aborted(std::string_view msg) { return Status(Code::kAborted, msg); }
  // "context: strerror(err)", with the code chosen from err.
  static Status FromErrno(std::string_view context, int err);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;
  // The errno that best describes this status (EIO for corruption).
  int ToErrno() const;
  // Returns a copy whose message is "context: <message>".
  Status Prefixed(std::string_view context) const;

 private:
  Status(Code code, std::string_view msg) : code_(code), msg_(msg) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be OK
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace fanstore

// Propagates a non-OK Status from the current function. The only macro hiding a return;
// it names itself accordingly.
#define FS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::fanstore::Status fs_status_ = (expr);  \
    if (!fs_status_.ok()) return fs_status_; \
  } while (0)
