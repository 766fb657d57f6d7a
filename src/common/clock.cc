#include "common/clock.h"

#include <ctime>

namespace segstore {
namespace {

class SystemClock final : public Clock {
 public:
  UnixSeconds Now() const override { return static_cast<UnixSeconds>(std::time(nullptr)); }
};

}  // namespace

Clock* Clock::System() {
  static SystemClock clock;
  return &clock;
}

}  // namespace segstore
