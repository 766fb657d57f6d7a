#include "segstore/status.h"

namespace segstore {

Status::Status(Code code, std::string_view msg)
    : code_(code), msg_(std::make_unique<std::string>(msg)) {}

Status::Status(const Status& other)
    : code_(other.code_), msg_(other.msg_ ? std::make_unique<std::string>(*other.msg_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    code_ = other.code_;
    msg_ = other.msg_ ? std::make_unique<std::string>(*other.msg_) : nullptr;
  }
  return *this;
}

std::string_view Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "IOError";
    case Code::kDeviceFull:
      return "DeviceFull";
    case Code::kConflict:
      return "Conflict";
    case Code::kLimitExceeded:
      return "LimitExceeded";
    case Code::kBusy:
      return "Busy";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kInternal:
      return "Internal";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kTimeout:
      return "Timeout";
    case Code::kUnauthenticated:
      return "Unauthenticated";
    case Code::kWrongNode:
      return "WrongNode";
    case Code::kLogUnavailable:
      return "LogUnavailable";
    case Code::kInDoubt:
      return "InDoubt";
    case Code::kReadOnly:
      return "ReadOnly";
  }
  return "Unknown";
}

Status Status::FromCode(uint8_t code, std::string_view msg) {
  if (code == 0) return Status();
  if (code > kMaxCode) {
    return Internal("unknown status code " + std::to_string(code) + ": " + std::string(msg));
  }
  return Status(static_cast<Code>(code), msg);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  if (msg_ && !msg_->empty()) {
    out += ": ";
    out += *msg_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  if (msg_ && !msg_->empty()) {
    msg += ": ";
    msg += *msg_;
  }
  return Status(code_, msg);
}

}  // namespace segstore
