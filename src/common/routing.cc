#include "segstore/routing.h"

#include <array>

namespace segstore {
namespace {

// The CRC of each byte value, most significant bit first.
constexpr std::array<uint16_t, 256> MakeTable() {
  std::array<uint16_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b << 8;
    for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    t[b] = static_cast<uint16_t>(crc);
  }
  return t;
}
constexpr std::array<uint16_t, 256> kTable = MakeTable();

}  // namespace

uint16_t Crc16Xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ static_cast<uint8_t>(c)) & 0xff]);
  }
  return crc;
}

std::string_view HashTag(std::string_view user_id) {
  const size_t open = user_id.find('{');
  if (open == std::string_view::npos) return user_id;
  const size_t close = user_id.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return user_id;
  return user_id.substr(open + 1, close - open - 1);
}

}  // namespace segstore
