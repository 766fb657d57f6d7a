// The reference workload's deterministic pieces (../shared/workload.md),
// shared by every benchmark and data generator: user keys and the random
// streams derived from a user's index, the segments and the profile fields.
// Plain data and the standard library only (no segstore type), so that any
// tool can include it.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace segstore::bench {

// User i's key: the 128-bit XXH3 hash of i, as a 36-character lower-case
// UUID string (8-4-4-4-12).
inline std::string UserKey(uint64_t i) {
  XXH128_hash_t h = XXH3_128bits(&i, sizeof i);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key(36, '-');
  // Hex digits of high64 then low64, most significant first, around the dashes.
  int pos = 0;
  for (int word = 0; word < 2; ++word) {
    uint64_t v = word == 0 ? h.high64 : h.low64;
    for (int shift = 60; shift >= 0; shift -= 4) {
      if (pos == 8 || pos == 13 || pos == 18 || pos == 23) ++pos;
      key[pos++] = kHex[(v >> shift) & 0xf];
    }
  }
  return key;
}

// One of a user's segments: its ID and how many whole hours (1 to 720) ahead
// of the current hour it expires.
struct ReferenceSegment {
  uint64_t id;
  uint32_t hours;
};

// User i's segments: 1,000 distinct IDs uniform in [0, 82000), ascending.
// Deterministic in i; every load generator uses this one.
inline std::vector<ReferenceSegment> ReferenceSegments(uint64_t user) {
  std::mt19937_64 rng(user * 0x9E3779B97F4A7C15ull + 1);
  std::set<uint64_t> ids;
  while (ids.size() < 1000) ids.insert(rng() % 82000);
  std::vector<ReferenceSegment> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) out.push_back({id, static_cast<uint32_t>(1 + rng() % 720)});
  return out;
}

// Unix seconds of an expiry `hours` whole hours after the hour holding `now`.
inline uint32_t WholeHourExpiry(uint32_t now, uint32_t hours) {
  return static_cast<uint32_t>((uint64_t{now} / 3600 + hours) * 3600);
}

// ---- Profile fields (workload.md, "Profile fields")

// Frequency-cap counters are named after campaigns: 5,000 of them, a user
// counting 20.
inline constexpr uint32_t kReferenceCampaigns = 5000;
inline constexpr size_t kReferenceCaps = 20;
// What a frequency-capping bidder asks a get for: every cap counter.
inline constexpr char kCapPrefix[] = "cap:";

// Campaign c's 6-digit number (c < 5,000): distinct for distinct c (7,919 is
// a prime coprime with 900,000), spread over [100000, 999999].
inline uint32_t CampaignNumber(uint32_t c) { return 100000 + (c * 7919u) % 900000; }
// The counter of campaign c: "cap:" and its number ("cap:107919").
inline std::string CapName(uint32_t c) { return kCapPrefix + std::to_string(CampaignNumber(c)); }

// User i's 20 campaigns: distinct indices in [0, 5000), ascending.
// Deterministic in i, and drawn from a stream of their own, so a tool that
// picks one of a user's counters need not make its other fields.
inline std::vector<uint32_t> ReferenceCampaigns(uint64_t user) {
  std::mt19937_64 rng(user * 0xD1B54A32D192ED03ull + 21);
  std::set<uint32_t> campaigns;
  while (campaigns.size() < kReferenceCaps) {
    campaigns.insert(static_cast<uint32_t>(rng() % kReferenceCampaigns));
  }
  return {campaigns.begin(), campaigns.end()};
}

// One profile field: a name, a typed value and an expiry. The types are
// those of segstore's FieldValue that the workload uses.
struct ReferenceField {
  enum class Type : uint8_t { kInt, kDouble, kString, kTime };
  std::string name;
  Type type = Type::kInt;
  int64_t i = 0;            // kInt; kTime: Unix seconds
  double d = 0;             // kDouble
  std::string s;            // kString
  uint32_t expires_at = 0;  // Unix seconds; 0: never
};

// Unix seconds of the end of the UTC day holding `now` (the next midnight).
inline uint32_t EndOfUtcDay(uint32_t now) {
  return static_cast<uint32_t>((uint64_t{now} / 86400 + 1) * 86400);
}

// The five fields besides the counters, by name.
inline constexpr const char* kReferenceFieldNames[] = {"last_seen", "country", "score", "device",
                                                       "consent"};

// User i's 25 fields at `now`: its 20 counters (CapName of each of
// ReferenceCampaigns(i), value uniform in [0, 10], expiring at the end of
// the UTC day), then last_seen (a time within the last 30 days, no
// expiry), country (2 letters, no expiry), score (a double in [0, 1),
// expiring in 7 days), device (8 to 16 bytes, no expiry) and consent (120
// bytes, expiring in 390 days). Values are deterministic in i; expiries
// follow `now`.
inline std::vector<ReferenceField> ReferenceFields(uint64_t user, uint32_t now) {
  using Type = ReferenceField::Type;
  std::vector<ReferenceField> out;
  out.reserve(kReferenceCaps + 5);
  std::mt19937_64 rng(user * 0x94D049BB133111EBull + 2121);
  const uint32_t end_of_day = EndOfUtcDay(now);
  for (uint32_t c : ReferenceCampaigns(user)) {
    out.push_back({CapName(c), Type::kInt, static_cast<int64_t>(rng() % 11), 0, {}, end_of_day});
  }
  static constexpr const char* kCountries[] = {"US", "GB", "DE", "FR", "ES", "IT", "NL", "PL",
                                               "SE", "BR", "MX", "CA", "IN", "JP", "AU", "ZA"};
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  static constexpr char kBase64Url[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const auto last_seen = static_cast<int64_t>(now) - static_cast<int64_t>(rng() % (30 * 86400));
  out.push_back({"last_seen", Type::kTime, std::max<int64_t>(0, last_seen), 0, {}, 0});
  out.push_back({"country", Type::kString, 0, 0, kCountries[rng() % 16], 0});
  const double score = std::ldexp(static_cast<double>(rng() >> 11), -53);
  out.push_back({"score", Type::kDouble, 0, score, {}, now + 7 * 86400});
  std::string device(8 + rng() % 9, 'x');
  for (char& ch : device) ch = kAlnum[rng() % 36];
  out.push_back({"device", Type::kString, 0, 0, std::move(device), 0});
  std::string consent(120, 'x');
  for (char& ch : consent) ch = kBase64Url[rng() % 64];
  out.push_back({"consent", Type::kString, 0, 0, std::move(consent), now + 390 * 86400});
  return out;
}

// The bytes of `fields`' string values (what issue 21's budget of bytes on
// the device leaves out: 130 to 138 for a user's reference fields).
inline uint64_t StringBytes(const std::vector<ReferenceField>& fields) {
  uint64_t n = 0;
  for (const ReferenceField& f : fields)
    n += f.type == ReferenceField::Type::kString ? f.s.size() : 0;
  return n;
}

// Every name the reference fields use: the five, then the 5,000 counters in
// campaign order (the order segbench registers them in a server's table).
inline std::vector<std::string> ReferenceFieldNameList() {
  std::vector<std::string> out(std::begin(kReferenceFieldNames), std::end(kReferenceFieldNames));
  for (uint32_t c = 0; c < kReferenceCampaigns; ++c) out.push_back(CapName(c));
  return out;
}

}  // namespace segstore::bench
