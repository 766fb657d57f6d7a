// Routing: which of the 4,096 partitions a user ID belongs to. A public
// function of the ID alone, the same on every node, client and tool
// (proto/PROTOCOL.md, "Partitions", has it with test vectors).
//
// It is Redis Cluster's rule, so that cluster-aware Redis clients route to
// segstore as they route to Redis: slot = CRC16-XMODEM(the ID, or its hash
// tag) mod 16,384, and partition = slot / 4 (partition p is slots 4p to
// 4p + 3). The hash tag: when the ID holds a '{' and a later '}' with at least
// one byte between the first such pair, only those bytes are hashed, so that
// "{user42}.cookie" and "{user42}.device" share a partition.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace segstore {

inline constexpr uint32_t kSlots = 16384;
inline constexpr uint32_t kPartitions = 4096;
inline constexpr uint32_t kSlotsPerPartition = kSlots / kPartitions;

// CRC-16/XMODEM: polynomial 0x1021, initial value 0, no reflection, no final
// XOR (the check value of "123456789" is 0x31C3).
uint16_t Crc16Xmodem(std::string_view bytes);

// The bytes of `user_id` that are hashed: its hash tag, or all of it.
std::string_view HashTag(std::string_view user_id);

// Redis Cluster's key slot of `user_id`, in [0, 16384).
inline uint32_t SlotOf(std::string_view user_id) { return Crc16Xmodem(HashTag(user_id)) % kSlots; }

// The partition of `user_id`, in [0, 4096).
inline uint32_t PartitionOf(std::string_view user_id) {
  return SlotOf(user_id) / kSlotsPerPartition;
}

}  // namespace segstore
