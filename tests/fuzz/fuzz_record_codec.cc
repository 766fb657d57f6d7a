// libFuzzer target: the profile codec (src/profile/codec.h) decoding
// arbitrary bytes as a record body, of version 1, 2 (with a log position), 3
// (with a group section) or 4 (with a fields section, field_codec.h, and
// maybe a group section). A refusal must be Corruption. A fields section
// that decodes must hold valid fields that re-encode to a section decoding
// to the same fields, and to the same bytes again. What decodes must
// be a valid profile (ids strictly ascending; an expiry is kNever or a second
// that exists) in a valid group (users 1..65535 bytes, strictly ascending;
// a group section only in version 3, and never empty there) whose
// re-encoding, with the same log position and group, decodes to the same
// segments, position and group, and re-encodes to the same bytes;
// DecodeLogPosition must read the position DecodeColumns read (it reads only
// the version and position: it may accept a body the others refuse, never
// refuse one they accept); DecodeColumns into a Columns that held another
// profile and group must give what a fresh decode gives; and the get path's
// DecodeSelect must give what DecodeColumns then Select give, the position
// and group included; DecodeHead must read the head DecodeColumns read, and
// the segments' bytes it keeps must re-encode as the segments do. The input also spells a group
// (GroupFrom), which must survive an encoding with the decoded segments (or none) and its decoding.
//
// Seeds: encodings of a few profiles, without and with a log position,
// written by fuzz_seeds (seeds.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "profile/codec.h"
#include "profile/field_codec.h"
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
    segstore::profile::Group group;  // and a group
    group.member = true;
    group.link_expires = 1'800'000'000;
    group.members = {{"earlier-a", segstore::kNever}, {"earlier-b", 1'800'003'600}};
    std::string out;
    segstore::profile::EncodeProfile(segs, 987654321, group, &out);  // a position to leave behind
    return out;
  }();
  return body;
}

// A group the input spells: a member when its size is odd, with a link expiry
// from its first bytes; members from runs of its bytes (each a length byte,
// then up to 8 bytes of user, then an expiry byte), sorted and made unique.
segstore::profile::Group GroupFrom(std::string_view in) {
  segstore::profile::Group group;
  group.member = in.size() % 2 == 1;
  if (group.member) {
    for (size_t i = 0; i < std::min<size_t>(in.size(), 4); ++i) {
      group.link_expires = (group.link_expires << 8) | static_cast<uint8_t>(in[i]);
    }
  }
  size_t at = 0;
  while (at < in.size() && group.members.size() < 64) {
    const size_t length = 1 + static_cast<uint8_t>(in[at++]) % 8;
    if (in.size() - at < length + 1) break;
    segstore::profile::GroupMember m;
    m.user.assign(in.substr(at, length));
    at += length;
    const auto e = static_cast<uint8_t>(in[at++]);
    m.expires_at = e < 16 ? segstore::kNever : e == 255 ? UINT32_MAX : 1'790'000'000u + e;
    group.members.push_back(std::move(m));
  }
  std::sort(group.members.begin(), group.members.end(),
            [](const auto& a, const auto& b) { return a.user < b.user; });
  group.members.erase(std::unique(group.members.begin(), group.members.end(),
                                  [](const auto& a, const auto& b) { return a.user == b.user; }),
                      group.members.end());
  return group;
}

// The group `in` spells, with `segments`: encoded, then decoded by every
// decoder, it comes back whole, the segments and the position with it.
void CheckGroupRoundTrip(std::string_view in, const std::vector<segstore::Segment>& segments) {
  using namespace segstore;
  const profile::Group group = GroupFrom(in);
  const uint64_t position = in.size() % 3 == 0 ? 0 : in.size();
  std::string body;
  profile::EncodeProfile(segments, position, group, &body);
  FUZZ_CHECK(group.empty() ? body[0] != 3 : body[0] == 3);
  profile::Columns columns;
  FUZZ_CHECK(profile::DecodeColumns(Previous(), &columns).ok());
  FUZZ_CHECK(profile::DecodeColumns(body, &columns).ok());
  FUZZ_CHECK(columns.log_position == position);
  if (group.empty()) {
    FUZZ_CHECK(columns.group == profile::Group{});
  } else {
    FUZZ_CHECK(columns.group == group);
  }
  FUZZ_CHECK(columns.size() == segments.size());
  for (size_t i = 0; i < segments.size(); ++i) FUZZ_CHECK(columns.At(i) == segments[i]);
  const Result<uint64_t> read = profile::DecodeLogPosition(body);
  FUZZ_CHECK(read.ok() && *read == position);
  static profile::Columns scratch;
  GetResult got;
  FUZZ_CHECK(profile::DecodeSelect(body, 1'790'000'000, GetOptions{}, &scratch, &got).ok());
  FUZZ_CHECK(scratch.group == columns.group && scratch.log_position == position);
}

// A fields section DecodeColumns left undecoded: Corruption, or valid fields
// that round-trip.
void CheckFields(const std::string& section) {
  using namespace segstore;
  if (section.empty()) return;
  std::vector<profile::StoredField> fields;
  const Status s = profile::DecodeFieldSection(section, &fields);
  if (!s.ok()) {
    FUZZ_CHECK(s.IsCorruption());
    return;
  }
  FUZZ_CHECK(!fields.empty());
  for (size_t i = 0; i < fields.size(); ++i) {
    const profile::StoredField& f = fields[i];
    FUZZ_CHECK(f.name_id != 0 ? f.name.empty()
                              : !f.name.empty() && f.name.size() <= profile::kMaxFieldNameBytes);
    if (i > 0) FUZZ_CHECK(profile::StoredBefore(fields[i - 1], f));
    FUZZ_CHECK(static_cast<uint8_t>(f.value.type) <= static_cast<uint8_t>(FieldValue::Type::kTime));
    if (f.value.type == FieldValue::Type::kTime) {
      FUZZ_CHECK(f.value.i >= 0 && f.value.i <= UINT32_MAX);
    }
  }
  std::string again;
  profile::EncodeFieldSection(fields, &again);
  std::vector<profile::StoredField> back;
  FUZZ_CHECK(profile::DecodeFieldSection(again, &back).ok());
  FUZZ_CHECK(back == fields);
  std::string third;
  profile::EncodeFieldSection(back, &third);
  FUZZ_CHECK(third == again);
}

// A write of fields' view of a body DecodeColumns took as `columns`: the
// same head, the segments' count, a bound below their earliest finite expiry
// (that expiry itself when the body is canonical, as `canonical` is: the
// body re-encoded); and the segments' bytes it keeps, under a new head, give
// what encoding the segments gives.
void CheckHead(std::string_view body, const segstore::profile::Columns& columns,
               const std::vector<segstore::Segment>& segments, const std::string& canonical) {
  using namespace segstore;
  profile::BodyHead head;
  FUZZ_CHECK(profile::DecodeHead(body, &head).ok());
  FUZZ_CHECK(head.log_position == columns.log_position && head.group == columns.group &&
             head.fields == columns.fields && head.count == segments.size());
  UnixSeconds earliest = kNever;
  for (const Segment& seg : segments) {
    if (seg.expires_at != kNever && (earliest == kNever || seg.expires_at < earliest)) {
      earliest = seg.expires_at;
    }
  }
  // kNever says no segment has a finite expiry; a finite one is no later
  // than the earliest (a body this codec never writes may give one when
  // none has: all "never" in a width that leaves room for more).
  FUZZ_CHECK(head.earliest == kNever ? earliest == kNever
                                     : earliest == kNever || head.earliest <= earliest);
  if (canonical != body) return;
  FUZZ_CHECK(head.earliest == earliest);
  std::string kept;
  profile::EncodeProfileKeeping(head.segments, head.log_position, head.group, head.fields, &kept);
  FUZZ_CHECK(kept == body);
  // A new head over the same segments: fields added (or dropped), no position.
  std::string fields;
  if (head.fields.empty()) {
    profile::StoredField f;
    f.name = "a";
    f.value = FieldValue::Int(1);
    profile::EncodeFieldSection(std::span<const profile::StoredField>(&f, 1), &fields);
  }
  profile::EncodeProfileKeeping(head.segments, 0, head.group, fields, &kept);
  std::string encoded;
  profile::EncodeProfile(segments, 0, head.group, std::string_view(fields), &encoded);
  FUZZ_CHECK(kept == encoded);
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
    FUZZ_CHECK(scratch.group == columns.group);
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
    CheckGroupRoundTrip(body, {});
    return 0;
  }
  CheckGroupRoundTrip(body, segments);
  // Version 1 carries no position, version 2 one of at least 1, version 3
  // any position and a group section that is not empty, version 4 a fields
  // section (and maybe a group section).
  FUZZ_CHECK(position.ok() && *position == reused.log_position);
  FUZZ_CHECK(body[0] != 1 || *position == 0);
  FUZZ_CHECK(body[0] != 2 || *position != 0);
  if (body[0] != 4) FUZZ_CHECK(reused.group.empty() == (body[0] != 3));
  FUZZ_CHECK(reused.fields.empty() == (body[0] != 4));
  FUZZ_CHECK(profile::HasFieldSection(body) == (body[0] == 4));
  FUZZ_CHECK(profile::HasGroupSection(body) == !reused.group.empty());
  CheckFields(reused.fields);
  if (reused.group.empty()) FUZZ_CHECK(reused.group == profile::Group{});
  const std::vector<profile::GroupMember>& members = reused.group.members;
  for (size_t i = 0; i < members.size(); ++i) {
    FUZZ_CHECK(!members[i].user.empty() && members[i].user.size() <= 65535);
    if (i > 0)
      FUZZ_CHECK(std::string_view(members[i - 1].user) < std::string_view(members[i].user));
  }
  if (!reused.group.member) FUZZ_CHECK(reused.group.link_expires == kNever);
  FUZZ_CHECK(reused.size() == segments.size());
  for (size_t i = 0; i < segments.size(); ++i) FUZZ_CHECK(reused.At(i) == segments[i]);
  for (size_t i = 1; i < segments.size(); ++i) FUZZ_CHECK(segments[i - 1].id < segments[i].id);

  std::string again;
  profile::EncodeProfile(segments, *position, reused.group, std::string_view(reused.fields),
                         &again);
  FUZZ_CHECK(again[0] == body[0]);  // each version re-encodes as itself
  profile::Columns back;
  FUZZ_CHECK(profile::DecodeColumns(again, &back).ok());
  FUZZ_CHECK(back.log_position == *position);
  FUZZ_CHECK(back.group == reused.group);
  FUZZ_CHECK(back.fields == reused.fields);
  FUZZ_CHECK(back.size() == segments.size());
  for (size_t i = 0; i < segments.size(); ++i) FUZZ_CHECK(back.At(i) == segments[i]);
  std::string third;
  profile::EncodeProfile(segments, back.log_position, back.group, std::string_view(back.fields),
                         &third);
  FUZZ_CHECK(third == again);
  CheckHead(body, reused, segments, again);
  if (!reused.fields.empty()) {
    // Without its fields: the body of versions 1 to 3 it would be.
    profile::EncodeProfile(segments, *position, reused.group, &again);
    FUZZ_CHECK(again[0] != 4);
  }
  // Without the position and the group: the version-1 body, which is the
  // version-2 or 3 one without its position and group section.
  std::string v1;
  profile::EncodeSegments(segments, &v1);
  if (again[0] == 1) {
    FUZZ_CHECK(v1 == again);
  } else {
    FUZZ_CHECK(v1[0] == 1 && again.size() > v1.size() &&
               again.compare(again.size() - (v1.size() - 1), std::string::npos, v1, 1,
                             std::string::npos) == 0);
  }
  return 0;
}
