// libFuzzer target: the profile codec (src/profile/codec.h) decoding
// arbitrary bytes as a record body, of version 1 or 2 (with a log position).
// A refusal must be Corruption. What decodes must be a valid profile (ids
// strictly ascending; an expiry is kNever or a second that exists) whose
// re-encoding, with the same log position, decodes to the same segments and
// position, and re-encodes to the same bytes; DecodeLogPosition must read
// the position DecodeColumns read (it reads only the header: it may accept
// a body the others refuse, never refuse one they accept); DecodeColumns
// into a Columns that held another profile must give what a fresh decode
// gives; and the get path's DecodeSelect must give what DecodeColumns then
// Select give, the position included.
//
// Seeds: encodings of a few profiles, without and with a log position,
// written by fuzz_seeds (seeds.cc).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "profile/codec.h"
#include "profile/segment_ops.h"

namespace {

// A profile with every column (both attributes, "never" and finite expiries)
// to leave in a reused Columns before the input is decoded into it.
const std::string& Previous() {
  static const std::string body = [] {
    std::vector<segstore::Segment> segs;
    for (uint32_t i = 0; i < 40; ++i) {
      segstore::Segment s;
      s.id = 1000 + 7ull * i * i;
      s.expires_at = i % 5 == 0 ? segstore::kNever : 1'800'000'000 + 3600 * i;
      if (i % 2 == 0) s.attr1 = i;
      if (i % 3 == 0) s.attr2 = 0xffff0000u + i;
      segs.push_back(s);
    }
    std::string out;
    segstore::profile::EncodeSegments(segs, 987654321, &out);  // a position to leave behind
    return out;
  }();
  return body;
}

}  // namespace

// The get path's one-pass DecodeSelect against DecodeColumns then Select:
// the same verdict, and the same answer under a few kinds of options.
void CheckDecodeSelect(std::string_view body, const segstore::Status& decoded) {
  using namespace segstore;
  static profile::Columns scratch;  // reused across inputs, as a session does
  profile::Columns columns;
  const bool ok = profile::DecodeColumns(body, &columns).ok();
  FUZZ_CHECK(ok == decoded.ok());
  for (int kind = 0; kind < 4; ++kind) {
    GetOptions o;
    if (kind == 1) o.ids_only = true, o.limit = 3;
    if (kind == 2) o.id_from = 1000, o.id_to = 5000, o.count_only = true;
    if (kind == 3) o.expiry_from = 1'800'000'000, o.outside_expiry_window = true;
    GetResult got;
    Result<uint32_t> live = profile::DecodeSelect(body, 1'790'000'000, o, &scratch, &got);
    FUZZ_CHECK(live.ok() == ok);
    if (!ok) {
      FUZZ_CHECK(live.status().IsCorruption());
      continue;
    }
    FUZZ_CHECK(scratch.log_position == columns.log_position);
    GetResult want;
    FUZZ_CHECK(*live == profile::Select(columns, 1'790'000'000, o, &want));
    FUZZ_CHECK(got.count == want.count && got.ids == want.ids && got.expires == want.expires &&
               got.attr1 == want.attr1 && got.attr2 == want.attr2);
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace segstore;
  const std::string_view body = fuzz::AsChars(data, size);
  std::vector<Segment> segments;
  const Status s = profile::DecodeSegments(body, &segments);
  CheckDecodeSelect(body, s);

  // The read path reuses one Columns across records: what an earlier decode
  // left in it must change neither the verdict nor the result.
  profile::Columns reused;
  FUZZ_CHECK(profile::DecodeColumns(Previous(), &reused).ok());
  const Status s_reused = profile::DecodeColumns(body, &reused);
  FUZZ_CHECK(s_reused.ok() == s.ok());
  const Result<uint64_t> position = profile::DecodeLogPosition(body);
  FUZZ_CHECK(position.ok() || position.status().IsCorruption());
  if (!s.ok()) {
    FUZZ_CHECK(s.IsCorruption() && s_reused.IsCorruption());
    return 0;
  }
  // Version 1 carries no position, version 2 one of at least 1.
  FUZZ_CHECK(position.ok() && *position == reused.log_position);
  FUZZ_CHECK((*position == 0) == (body[0] == 1));
  FUZZ_CHECK(reused.size() == segments.size());
  for (size_t i = 0; i < segments.size(); ++i) FUZZ_CHECK(reused.At(i) == segments[i]);
  for (size_t i = 1; i < segments.size(); ++i) FUZZ_CHECK(segments[i - 1].id < segments[i].id);

  std::string again;
  profile::EncodeSegments(segments, *position, &again);
  profile::Columns back;
  FUZZ_CHECK(profile::DecodeColumns(again, &back).ok());
  FUZZ_CHECK(back.log_position == *position);
  FUZZ_CHECK(back.size() == segments.size());
  for (size_t i = 0; i < segments.size(); ++i) FUZZ_CHECK(back.At(i) == segments[i]);
  std::string third;
  profile::EncodeSegments(segments, back.log_position, &third);
  FUZZ_CHECK(third == again);
  // Without the position: the version-1 body, which is the version-2 one
  // without its position.
  std::string v1;
  profile::EncodeSegments(segments, &v1);
  if (*position == 0) {
    FUZZ_CHECK(v1 == again);
  } else {
    FUZZ_CHECK(v1[0] == 1 && again[0] == 2 && again.size() > v1.size() &&
               again.compare(again.size() - (v1.size() - 1), std::string::npos, v1, 1,
                             std::string::npos) == 0);
  }
  return 0;
}
