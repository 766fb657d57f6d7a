// Status: the outcome of an operation that can fail in an expected way.
//
// A Status is either OK or carries one code from a closed list plus a message
// for people. The codes map one to one to the wire protocol's error codes, so
// adding one is a protocol change. OK statuses carry no message and cost no
// allocation. Thread-compatible: a const Status may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace segstore {

class [[nodiscard]] Status {
 public:
  // The closed list of failure kinds. Values are stable: they travel on the wire.
  enum class Code : uint8_t {
    kOk = 0,
    kNotFound = 1,          // the key (or profile) does not exist
    kInvalidArgument = 2,   // the caller's input is malformed or out of bounds
    kCorruption = 3,        // bytes read back from the device failed validation
    kIOError = 4,           // the device reported an error, or a short transfer
    kDeviceFull = 5,        // no free write block left for this write
    kConflict = 6,          // a compare-and-set saw another version
    kLimitExceeded = 7,     // a configured limit (size, count) would be passed
    kBusy = 8,              // too much work in flight; retry later
    kUnavailable = 9,       // shutting down, or writes refused after a device error
    kInternal = 10,         // a bug: an impossible state was detected
    kUnsupported = 11,      // an operation or protocol version this server does not know
    kTimeout = 12,          // no answer in time (set by clients; servers never send it)
    kUnauthenticated = 13,  // the server wants an authenticated hello first, or the secret is wrong
    kWrongNode = 14,        // this cluster node does not hold the user's partition now
    kLogUnavailable = 15,   // a cluster's log did not take the write (nothing written); retry
    kInDoubt = 16,          // a write may or may not have been made; retry with its write ID
    kReadOnly = 17,         // a passive cluster's node: it takes no writes; send them elsewhere
  };
  static constexpr uint8_t kMaxCode = 17;

  Status() noexcept = default;
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status DeviceFull(std::string_view msg) { return Status(Code::kDeviceFull, msg); }
  static Status Conflict(std::string_view msg) { return Status(Code::kConflict, msg); }
  static Status LimitExceeded(std::string_view msg) { return Status(Code::kLimitExceeded, msg); }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, msg); }
  static Status Unavailable(std::string_view msg) { return Status(Code::kUnavailable, msg); }
  static Status Internal(std::string_view msg) { return Status(Code::kInternal, msg); }
  static Status Unsupported(std::string_view msg) { return Status(Code::kUnsupported, msg); }
  static Status Timeout(std::string_view msg) { return Status(Code::kTimeout, msg); }
  static Status Unauthenticated(std::string_view msg) {
    return Status(Code::kUnauthenticated, msg);
  }
  static Status WrongNode(std::string_view msg) { return Status(Code::kWrongNode, msg); }
  static Status LogUnavailable(std::string_view msg) { return Status(Code::kLogUnavailable, msg); }
  static Status InDoubt(std::string_view msg) { return Status(Code::kInDoubt, msg); }
  static Status ReadOnly(std::string_view msg) { return Status(Code::kReadOnly, msg); }
  // A status of `code` (from the wire: any value up to kMaxCode; larger
  // values give Internal, saying so) with `msg`.
  static Status FromCode(uint8_t code, std::string_view msg);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }

  // The message alone, without the code's name; empty for OK.
  std::string_view message() const { return msg_ ? std::string_view(*msg_) : std::string_view(); }
  // "NotFound: <message>", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is `context + ": " + message()`.
  Status WithContext(std::string_view context) const;

  static std::string_view CodeName(Code code);

 private:
  Status(Code code, std::string_view msg);

  Code code_ = Code::kOk;
  std::unique_ptr<std::string> msg_;  // null when OK
};

}  // namespace segstore
