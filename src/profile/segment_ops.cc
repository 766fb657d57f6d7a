#include "profile/segment_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace segstore::profile {
namespace {

std::optional<uint32_t> AttrOf(const Columns& c, size_t i, int which) {
  if (which == 1)
    return c.has_attr1 && (c.attr_present[i] & 1) ? std::optional(c.attr1[i]) : std::nullopt;
  return c.has_attr2 && (c.attr_present[i] & 2) ? std::optional(c.attr2[i]) : std::nullopt;
}

}  // namespace

uint32_t LiveCount(const Columns& c, UnixSeconds now) {
  uint32_t n = 0;
  for (const UnixSeconds e : c.expires) n += Alive(e, now) ? 1 : 0;
  return n;
}

uint32_t Select(const Columns& c, UnixSeconds now, const GetOptions& o, GetResult* out) {
  out->ids.clear();
  out->expires.clear();
  out->attr1.clear();
  out->attr2.clear();
  out->count = 0;
  const size_t n = c.size();
  const bool windowed = o.expiry_from != 0 || o.expiry_to != UINT32_MAX || o.outside_expiry_window;
  const bool list = !o.count_only;
  const bool with_expiries = list && !o.ids_only;
  const bool with_attrs = with_expiries && (c.has_attr1 || c.has_attr2);
  const size_t cap = o.limit != 0 ? std::min<size_t>(o.limit, n) : n;
  if (list) out->ids.reserve(cap);
  if (with_expiries) out->expires.reserve(cap);
  uint32_t live = 0;
  for (size_t i = 0; i < n; ++i) {
    const UnixSeconds exp = c.expires[i];
    if (!Alive(exp, now)) continue;
    ++live;
    const uint64_t id = c.ids[i];
    if (id < o.id_from || id > o.id_to) continue;
    if (windowed && InWindow(exp, o) == o.outside_expiry_window) continue;
    ++out->count;
    if (!list || (o.limit != 0 && out->ids.size() >= o.limit)) continue;
    out->ids.push_back(id);
    if (!with_expiries) continue;
    out->expires.push_back(exp);
    if (with_attrs) {
      out->attr1.push_back(AttrOf(c, i, 1));
      out->attr2.push_back(AttrOf(c, i, 2));
    }
  }
  // Attribute columns only when some listed segment has the attribute.
  auto none = [](const std::vector<std::optional<uint32_t>>& v) {
    return std::none_of(v.begin(), v.end(), [](const auto& a) { return a.has_value(); });
  };
  if (none(out->attr1)) out->attr1.clear();
  if (none(out->attr2)) out->attr2.clear();
  return live;
}

void MergeProfiles(std::span<const Columns* const> profiles, UnixSeconds now, Columns* out) {
  out->ids.clear();
  out->expires.clear();
  out->attr1.clear();
  out->attr2.clear();
  out->attr_present.clear();
  out->has_attr1 = out->has_attr2 = false;
  out->log_position = 0;
  out->group.clear();
  // A k-way merge of the profiles' id columns (each sorted, ids unique
  // within a profile): a min-heap of each profile's next live row.
  const auto k = static_cast<uint32_t>(profiles.size());
  std::vector<uint32_t> pos(k, 0);
  size_t rows = 0;
  for (const Columns* c : profiles) rows += c->size();
  out->ids.reserve(rows);
  out->expires.reserve(rows);
  auto next_live = [&](uint32_t p) {
    const Columns& c = *profiles[p];
    while (pos[p] < c.size() && !Alive(c.expires[pos[p]], now)) ++pos[p];
    return pos[p] < c.size();
  };
  using Head = std::pair<uint64_t, uint32_t>;  // (id, profile)
  std::vector<Head> heap;
  heap.reserve(k);
  for (uint32_t p = 0; p < k; ++p) {
    if (next_live(p)) heap.emplace_back(profiles[p]->ids[pos[p]], p);
  }
  const auto greater = std::greater<Head>();
  std::make_heap(heap.begin(), heap.end(), greater);
  // Whether expiry `a` is later than `b` (kNever the latest of all).
  auto later = [](UnixSeconds a, UnixSeconds b) {
    return a != b && (a == kNever || (b != kNever && a > b));
  };
  while (!heap.empty()) {
    const uint64_t id = heap.front().first;
    uint32_t best_p = UINT32_MAX, best_row = 0;
    UnixSeconds best_exp = 0;
    // Every profile holding `id` comes off the heap now, lowest index first
    // among equal ids (the pairs order by profile after id): so a later
    // expiry only ever replaces the best, and a tie keeps the earliest.
    while (!heap.empty() && heap.front().first == id) {
      std::pop_heap(heap.begin(), heap.end(), greater);
      const uint32_t p = heap.back().second;
      heap.pop_back();
      const uint32_t row = pos[p];
      const UnixSeconds exp = profiles[p]->expires[row];
      if (best_p == UINT32_MAX || later(exp, best_exp)) {
        best_p = p;
        best_row = row;
        best_exp = exp;
      }
      ++pos[p];
      if (next_live(p)) {
        heap.emplace_back(profiles[p]->ids[pos[p]], p);
        std::push_heap(heap.begin(), heap.end(), greater);
      }
    }
    const Columns& c = *profiles[best_p];
    out->ids.push_back(id);
    out->expires.push_back(best_exp);
    const std::optional<uint32_t> a1 = AttrOf(c, best_row, 1), a2 = AttrOf(c, best_row, 2);
    if (a1 || a2 || out->has_attr1 || out->has_attr2) {
      // Attribute columns only once some row has one (then for every row).
      out->attr1.resize(out->ids.size() - 1, 0);
      out->attr2.resize(out->ids.size() - 1, 0);
      out->attr_present.resize(out->ids.size() - 1, 0);
      out->attr1.push_back(a1.value_or(0));
      out->attr2.push_back(a2.value_or(0));
      out->attr_present.push_back(static_cast<uint8_t>((a1 ? 1 : 0) | (a2 ? 2 : 0)));
      out->has_attr1 = out->has_attr1 || a1.has_value();
      out->has_attr2 = out->has_attr2 || a2.has_value();
    }
  }
  if (out->has_attr1 || out->has_attr2) {
    out->attr1.resize(out->ids.size(), 0);
    out->attr2.resize(out->ids.size(), 0);
    out->attr_present.resize(out->ids.size(), 0);
  }
}

namespace {

// An expiry's rank among expiries: a later one is larger, kNever the largest
// of all (0 wraps round to the top).
inline uint64_t ExpiryRank(UnixSeconds e) { return static_cast<uint32_t>(e - 1); }
inline UnixSeconds FromRank(uint64_t claim) { return static_cast<UnixSeconds>((claim >> 32) + 1); }

// A row's claim on its id (MergeScratch): the larger claim is the merged view's.
inline uint64_t Claim(UnixSeconds e, uint32_t row) {
  return (ExpiryRank(e) << 32) | static_cast<uint32_t>(~row);
}

// The attributes of the row `claim` names, onto out's attribute columns,
// from its profile: the last to begin at or before it.
[[gnu::noinline]] void AppendAttributes(std::span<const Columns* const> profiles,
                                        const std::vector<uint32_t>& first_row, uint64_t claim,
                                        GetResult* out) {
  const uint32_t row = ~static_cast<uint32_t>(claim);
  const auto p = static_cast<size_t>(std::upper_bound(first_row.begin(), first_row.end(), row) -
                                     first_row.begin() - 1);
  out->attr1.push_back(AttrOf(*profiles[p], row - first_row[p], 1));
  out->attr2.push_back(AttrOf(*profiles[p], row - first_row[p], 2));
}

// Where SelectMerged puts the merged view's rows, given in id order: what
// Select would select from them, into a GetResult. The rows come a block or
// a run at a time, each taken by a loop whose counts stay in registers (as
// members, every store of an id could have changed them).
class MergedOut {
 public:
  // `rows`: how many the group holds, live or not (the merged view holds at
  // most that many).
  MergedOut(std::span<const Columns* const> profiles, const std::vector<uint32_t>& first_row,
            bool attrs, size_t rows, const GetOptions& o, GetResult* out)
      : profiles_(profiles),
        first_row_(first_row),
        o_(o),
        out_(out),
        windowed_(o.expiry_from != 0 || o.expiry_to != UINT32_MAX || o.outside_expiry_window),
        with_attrs_(!o.count_only && !o.ids_only && attrs),
        cap_(o.count_only   ? 0
             : o.limit != 0 ? std::min<size_t>(o.limit, rows)
                            : rows),
        // Every live row listed with its expiry, nothing else: a get's default.
        plain_(!windowed_ && !with_attrs_ && !o.count_only && !o.ids_only && o.limit == 0 &&
               o.id_from == 0 && o.id_to == UINT64_MAX) {
    const bool with_expiries = !o.count_only && !o.ids_only;
    // Every row is written, and kept by advancing past it: room for one more.
    out->ids.resize(cap_ + 1);
    out->expires.resize(with_expiries ? cap_ + 1 : 0);
    out->attr1.clear();
    out->attr2.clear();
    ids_ = out->ids.data();
    expires_ = with_expiries ? out->expires.data() : nullptr;
  }

  // Each id from + at whose bit is set in seen[0, words) (at = 64 * word +
  // bit), with its claim best[at], which is then set to 0.
  void AddBlock(uint64_t from, const uint64_t* seen, size_t words, uint64_t* best) {
    auto rows = [&](auto&& add) {
      for (size_t w = 0; w < words; ++w) {
        for (uint64_t bits = seen[w]; bits != 0; bits &= bits - 1) {
          const size_t at = w * 64 + static_cast<size_t>(std::countr_zero(bits));
          add(from + at, best[at]);
          best[at] = 0;  // every claim of the block is read once: all 0 again after
        }
      }
    };
    plain_ ? AddPlain(rows) : AddSelected(rows);
  }

  // The rows [rows, end).
  void AddRun(const MergeScratch::Row* rows, const MergeScratch::Row* end) {
    auto each = [&](auto&& add) {
      for (const MergeScratch::Row* r = rows; r != end; ++r) add(r->id, r->claim);
    };
    plain_ ? AddPlain(each) : AddSelected(each);
  }

  // Returns how many segments the merged view holds (all live).
  uint32_t Finish() {
    out_->ids.resize(listed_);
    if (expires_ != nullptr) out_->expires.resize(listed_);
    out_->count = count_;
    // Attribute columns only when some listed segment has the attribute.
    auto none = [](const std::vector<std::optional<uint32_t>>& v) {
      return std::none_of(v.begin(), v.end(), [](const auto& a) { return a.has_value(); });
    };
    if (none(out_->attr1)) out_->attr1.clear();
    if (none(out_->attr2)) out_->attr2.clear();
    return live_;
  }

 private:
  // `rows(add)` calls add(id, claim) for each row.
  template <typename Rows>
  void AddPlain(Rows&& rows) {
    uint64_t* const ids = ids_;
    UnixSeconds* const expires = expires_;
    size_t listed = listed_;
    rows([&](uint64_t id, uint64_t claim) {
      ids[listed] = id;
      expires[listed] = FromRank(claim);
      ++listed;
    });
    live_ += static_cast<uint32_t>(listed - listed_);
    count_ = live_;
    listed_ = listed;
  }

  template <typename Rows>
  void AddSelected(Rows&& rows) {
    uint64_t* const ids = ids_;
    UnixSeconds* const expires = expires_;
    const GetOptions o = o_;
    const bool windowed = windowed_, with_attrs = with_attrs_;
    const size_t cap = cap_;
    size_t listed = listed_;
    uint32_t live = live_, count = count_;
    rows([&](uint64_t id, uint64_t claim) {
      const UnixSeconds e = FromRank(claim);
      ++live;
      if (id < o.id_from || id > o.id_to) return;
      if (windowed && InWindow(e, o) == o.outside_expiry_window) return;
      ++count;
      ids[listed] = id;
      if (expires != nullptr) expires[listed] = e;
      if (with_attrs && listed < cap) AppendAttributes(profiles_, first_row_, claim, out_);
      listed += listed < cap ? 1 : 0;
    });
    live_ = live;
    count_ = count;
    listed_ = listed;
  }

  std::span<const Columns* const> profiles_;
  const std::vector<uint32_t>& first_row_;
  const GetOptions& o_;
  GetResult* out_;
  const bool windowed_;
  const bool with_attrs_;
  const size_t cap_;  // rows listed at most
  const bool plain_;
  uint64_t* ids_;
  UnixSeconds* expires_;  // null: no expiries listed
  uint32_t live_ = 0, count_ = 0;
  size_t listed_ = 0;
};

// The dense merge, a block of ids at a time (its claims stay in L1): each
// profile's rows in the block have their claims written in their ids'
// places, the larger kept, then the block is read in id order. No compare
// depends on how the profiles' ids interleave, so nothing mispredicts (a
// heap's compares did about every other time). `last`: hi - lo.
constexpr size_t kBlockIds = 2048;
void MergeDense(std::span<const Columns* const> profiles, UnixSeconds now, uint64_t lo,
                uint64_t last, MergeScratch* s, MergedOut* out) {
  s->cursor.assign(profiles.size(), 0);
  if (s->best.size() < kBlockIds) s->best.assign(kBlockIds, 0);
  uint64_t* const best = s->best.data();
  uint64_t seen[kBlockIds / 64];  // a bit an id of the block: some live row claims it
  for (uint64_t base = 0; base <= last; base += kBlockIds) {
    std::fill(std::begin(seen), std::end(seen), 0);
    for (size_t p = 0; p < profiles.size(); ++p) {
      const Columns& c = *profiles[p];
      const uint64_t* const ids = c.ids.data();
      const UnixSeconds* const expires = c.expires.data();
      const uint32_t first = s->first_row[p];
      const uint64_t from = lo + base;
      size_t i = s->cursor[p];
      for (const size_t n = c.size(); i < n; ++i) {
        const uint64_t at = ids[i] - from;  // the rows before this block are consumed
        if (at >= kBlockIds) break;
        const UnixSeconds e = expires[i];
        const uint64_t claim = Claim(e, first + static_cast<uint32_t>(i));
        // An expired row claims nothing (0, which every claim beats: no row
        // is numbered UINT32_MAX). In masks, not branches: which claim is
        // larger is a coin toss.
        const uint64_t alive = Alive(e, now) ? 1 : 0;
        const uint64_t mine = claim & (uint64_t{0} - alive);
        if (mine > best[at]) best[at] = mine;
        seen[at / 64] |= alive << (at % 64);
      }
      s->cursor[p] = i;
    }
    out->AddBlock(lo + base, seen, kBlockIds / 64, best);
  }
}

// Merges sorted runs a and b (ids unique within each) into out, one row an
// id, the larger claim kept: without branches on the data. Returns the end.
MergeScratch::Row* MergeTwo(const MergeScratch::Row* a, const MergeScratch::Row* a_end,
                            const MergeScratch::Row* b, const MergeScratch::Row* b_end,
                            MergeScratch::Row* out) {
  while (a != a_end && b != b_end) {
    const uint64_t x = a->id, y = b->id;
    const bool take_a = x <= y, take_b = y <= x;
    const uint64_t ra = a->claim, rb = b->claim;
    out->id = take_a ? x : y;
    out->claim = take_a && take_b ? std::max(ra, rb) : take_a ? ra : rb;
    ++out;
    a += take_a ? 1 : 0;
    b += take_b ? 1 : 0;
  }
  out = std::copy(a, a_end, out);
  return std::copy(b, b_end, out);
}

// The sparse merge: each profile's live rows as a run, runs merged two by
// two until one is left (log2 k passes over the rows).
void MergePairwise(std::span<const Columns* const> profiles, UnixSeconds now, size_t rows,
                   MergeScratch* s, MergedOut* out) {
  if (s->runs.size() < rows) s->runs.resize(rows);
  if (s->merged.size() < rows) s->merged.resize(rows);
  std::vector<uint32_t>& ends = s->run_ends;
  ends.clear();
  MergeScratch::Row* w = s->runs.data();
  for (size_t p = 0; p < profiles.size(); ++p) {
    const Columns& c = *profiles[p];
    const uint32_t first = s->first_row[p];
    for (size_t i = 0, n = c.size(); i < n; ++i) {
      w->id = c.ids[i];
      w->claim = Claim(c.expires[i], first + static_cast<uint32_t>(i));
      w += Alive(c.expires[i], now) ? 1 : 0;
    }
    ends.push_back(static_cast<uint32_t>(w - s->runs.data()));
  }
  while (ends.size() > 1) {
    const MergeScratch::Row* in = s->runs.data();
    MergeScratch::Row* to = s->merged.data();
    uint32_t begin = 0;
    size_t kept = 0;
    for (size_t r = 0; r < ends.size(); r += 2) {
      const uint32_t mid = ends[r];
      const uint32_t end = r + 1 < ends.size() ? ends[r + 1] : mid;
      to = MergeTwo(in + begin, in + mid, in + mid, in + end, to);
      ends[kept++] = static_cast<uint32_t>(to - s->merged.data());
      begin = end;
    }
    ends.resize(kept);
    std::swap(s->runs, s->merged);
  }
  const uint32_t n = ends.empty() ? 0 : ends[0];
  out->AddRun(s->runs.data(), s->runs.data() + n);
}

}  // namespace

uint32_t SelectMerged(std::span<const Columns* const> profiles, UnixSeconds now,
                      const GetOptions& o, MergeScratch* scratch, GetResult* out) {
  // Every row numbered over the whole group, the first profile's first.
  std::vector<uint32_t>& first_row = scratch->first_row;
  first_row.clear();
  uint64_t rows = 0, lo = UINT64_MAX, hi = 0;
  bool attrs = false;
  for (const Columns* c : profiles) {
    first_row.push_back(static_cast<uint32_t>(rows));
    rows += c->size();
    if (c->size() != 0) {
      lo = std::min(lo, c->ids.front());
      hi = std::max(hi, c->ids.back());
    }
    attrs = attrs || c->has_attr1 || c->has_attr2;
  }
  if (rows >= UINT32_MAX) {
    // Not a group a server holds (max_links times max_segments is far less).
    MergeProfiles(profiles, now, &scratch->fallback);
    return Select(scratch->fallback, now, o, out);
  }
  first_row.push_back(static_cast<uint32_t>(rows));
  MergedOut merged(profiles, first_row, attrs, static_cast<size_t>(rows), o, out);
  // Dense: a block of ids costs about what one row does at this spread.
  constexpr uint64_t kDenseIdsPerRow = 64;
  if (rows == 0) {
    // Nothing to merge.
  } else if (hi - lo < kDenseIdsPerRow * rows) {
    MergeDense(profiles, now, lo, hi - lo, scratch, &merged);
  } else {
    MergePairwise(profiles, now, static_cast<size_t>(rows), scratch, &merged);
  }
  return merged.Finish();
}

Status ValidateUpsert(std::span<const SegmentUpdate> updates, UpsertMode mode, UnixSeconds now) {
  std::vector<uint64_t> ids;
  ids.reserve(updates.size());
  for (const SegmentUpdate& u : updates) {
    ids.push_back(u.id);
    if (mode == UpsertMode::kAdd) {
      if (u.value == 0) {
        return Status::InvalidArgument(
            fmt::format("segment {}: add mode needs a positive number of seconds", u.id));
      }
      if (uint64_t{now} + u.value > UINT32_MAX) {
        return Status::InvalidArgument(fmt::format("segment {}: expiry past 2106", u.id));
      }
      continue;
    }
    if (u.ttl) {
      if (u.value == 0) {
        return Status::InvalidArgument(fmt::format("segment {}: a TTL of 0 seconds", u.id));
      }
      if (uint64_t{now} + u.value > UINT32_MAX) {
        return Status::InvalidArgument(
            fmt::format("segment {}: TTL of {} seconds runs past 2106", u.id, u.value));
      }
    } else if (u.value != kNever && u.value <= now) {
      return Status::InvalidArgument(fmt::format(
          "segment {}: expiry {} is not in the future (now is {})", u.id, u.value, now));
    }
  }
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end()) {
    return Status::InvalidArgument(fmt::format("segment {} appears twice in one upsert", *dup));
  }
  return Status::OK();
}

UpsertResult Merge(const Columns* c, std::span<const SegmentUpdate> updates,
                   const UpsertOptions& how, UnixSeconds now, std::vector<Segment>* out) {
  const UpsertMode mode = how.mode;
  std::vector<const SegmentUpdate*> sorted;
  sorted.reserve(updates.size());
  for (const SegmentUpdate& u : updates) sorted.push_back(&u);
  std::sort(sorted.begin(), sorted.end(),
            [](const SegmentUpdate* a, const SegmentUpdate* b) { return a->id < b->id; });

  // Sums saturate: the clock may have moved on since ValidateUpsert checked
  // them, and a wrapped sum would read as "never" (0) or as long past.
  auto after_now = [&](uint32_t seconds) -> UnixSeconds {
    return static_cast<UnixSeconds>(std::min<uint64_t>(uint64_t{now} + seconds, UINT32_MAX));
  };
  auto requested = [&](const SegmentUpdate& u) -> UnixSeconds {
    return u.ttl ? after_now(u.value) : u.value;
  };
  auto later = [](UnixSeconds a, UnixSeconds b) {
    return a == kNever || b == kNever ? kNever : std::max(a, b);
  };
  UpsertResult r;
  const size_t n = c ? c->size() : 0;
  out->resize(n + updates.size());  // at most; cut to size at the end
  Segment* w = out->data();
  size_t i = 0;  // the next old segment
  // Keeps the old segments before `end` (or all that are left), trimming the
  // expired ones: the tight loop an upsert of a few segments spends its time
  // in. Each is written, and kept only if alive: no branch to mispredict on
  // a third of them expired.
  auto keep_old = [&](std::optional<uint64_t> end) {
    for (; i < n && (!end || c->ids[i] < *end); ++i) {
      const bool alive = Alive(c->expires[i], now);
      c->CopyTo(i, w);
      w += alive ? 1 : 0;
      r.trimmed += alive ? 0 : 1;
    }
  };
  for (const SegmentUpdate* update : sorted) {
    const SegmentUpdate& u = *update;
    keep_old(u.id);
    const bool both = i < n && c->ids[i] == u.id;
    Segment s;
    s.id = u.id;
    if (both && Alive(c->expires[i], now)) {
      const UnixSeconds old = c->expires[i];
      switch (mode) {
        case UpsertMode::kSet:
          s.expires_at = requested(u);
          break;
        case UpsertMode::kExtend:
          s.expires_at = later(old, requested(u));
          break;
        case UpsertMode::kAdd:
          s.expires_at = old == kNever ? kNever
                                       : static_cast<UnixSeconds>(std::min<uint64_t>(
                                             uint64_t{old} + u.value, UINT32_MAX));
          break;
      }
      if (how.replace_attrs) {
        s.attr1 = u.attr1;
        s.attr2 = u.attr2;
      } else {
        s.attr1 = u.attr1 ? u.attr1 : AttrOf(*c, i, 1);
        s.attr2 = u.attr2 ? u.attr2 : AttrOf(*c, i, 2);
      }
      ++r.updated;
    } else {
      if (both) ++r.trimmed;  // it had expired: a new segment now
      s.expires_at = mode == UpsertMode::kAdd ? after_now(u.value) : requested(u);
      s.attr1 = u.attr1;
      s.attr2 = u.attr2;
      ++r.inserted;
    }
    if (both) ++i;
    *w++ = s;
  }
  keep_old(std::nullopt);
  out->resize(static_cast<size_t>(w - out->data()));
  r.count = static_cast<uint32_t>(out->size());
  return r;
}

uint32_t RemoveIds(const Columns& c, std::span<const uint64_t> ids, UnixSeconds now,
                   std::vector<Segment>* out, uint32_t* trimmed) {
  std::vector<uint64_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  out->clear();
  *trimmed = 0;
  uint32_t removed = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!Alive(c.expires[i], now)) {
      ++*trimmed;
      continue;
    }
    if (std::binary_search(sorted.begin(), sorted.end(), c.ids[i])) {
      ++removed;
      continue;
    }
    c.CopyTo(i, &out->emplace_back());
  }
  return removed;
}

Status ValidateExpire(const ExpireSpec& spec, UnixSeconds now) {
  if (spec.ttl && uint64_t{now} + spec.value > UINT32_MAX) {
    return Status::InvalidArgument(
        fmt::format("a TTL of {} seconds runs past 2106 (now is {})", spec.value, now));
  }
  return Status::OK();
}

bool ExpireHolds(ExpireCondition condition, UnixSeconds current, UnixSeconds target) {
  switch (condition) {
    case ExpireCondition::kNone:
      return true;
    case ExpireCondition::kNx:
      return current == kNever;
    case ExpireCondition::kXx:
      return current != kNever;
    case ExpireCondition::kGt:  // nothing is later than never
      return current != kNever && (target == kNever || target > current);
    case ExpireCondition::kLt:  // never is earlier than nothing
      return target != kNever && (current == kNever || target < current);
  }
  return false;
}

bool ApplyExpire(const Columns& c, std::span<const uint64_t> ids, const ExpireSpec& spec,
                 UnixSeconds now, ExpireResult* result, std::vector<Segment>* out,
                 uint32_t* trimmed) {
  // A TTL was validated to fit (saturated all the same); an absolute 0 is never.
  const UnixSeconds target =
      spec.ttl
          ? static_cast<UnixSeconds>(std::min<uint64_t>(uint64_t{now} + spec.value, UINT32_MAX))
          : spec.value;
  const bool in_future = target == kNever || target > now;
  const ExpireOutcome applies = in_future ? ExpireOutcome::kSet : ExpireOutcome::kRemoved;
  // What happens to each stored segment: kMissing (untouched), kSet, kRemoved.
  std::vector<ExpireOutcome> action(c.size(), ExpireOutcome::kMissing);
  result->results.clear();
  result->results.reserve(ids.size());
  bool changed = false;
  for (const uint64_t id : ids) {
    const auto it = std::lower_bound(c.ids.begin(), c.ids.end(), id);
    const size_t i = static_cast<size_t>(it - c.ids.begin());
    ExpireOutcome o = ExpireOutcome::kMissing;
    if (it != c.ids.end() && *it == id && Alive(c.expires[i], now)) {
      o = ExpireHolds(spec.condition, c.expires[i], target) ? applies : ExpireOutcome::kUnchanged;
      if (o == applies) {
        action[i] = o;
        changed = true;
      }
    }
    result->results.push_back(o);
  }
  out->clear();
  *trimmed = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!Alive(c.expires[i], now)) {
      ++*trimmed;
      continue;
    }
    if (action[i] == ExpireOutcome::kRemoved) continue;
    Segment& s = out->emplace_back();
    c.CopyTo(i, &s);
    if (action[i] == ExpireOutcome::kSet) s.expires_at = target;
  }
  result->count = static_cast<uint32_t>(out->size());
  return changed;
}

TrimResult TrimBefore(const Columns& c, UnixSeconds before, std::vector<Segment>* out) {
  out->clear();
  TrimResult r;
  for (size_t i = 0; i < c.size(); ++i) {
    if (Alive(c.expires[i], before)) {
      c.CopyTo(i, &out->emplace_back());
    } else {
      ++r.trimmed;
    }
  }
  r.remaining = static_cast<uint32_t>(out->size());
  return r;
}

namespace {

// The k-th smallest (1-based) of `v`, without the data-dependent branches of
// a comparison select (std::nth_element mispredicts about every other
// comparison on fresh data: in the server it cost as much as encoding the
// profile). A histogram of 1,024 buckets over [lo, hi] finds the bucket
// holding it; only that bucket's few values are then selected by comparison.
UnixSeconds KthSmallest(std::vector<UnixSeconds>& v, size_t k, UnixSeconds lo, UnixSeconds hi) {
  constexpr unsigned kBucketBits = 10;
  const unsigned shift = static_cast<unsigned>(std::bit_width((hi - lo) >> kBucketBits));
  uint32_t counts[(1u << kBucketBits) + 1] = {};
  for (const UnixSeconds e : v) ++counts[(e - lo) >> shift];
  size_t bucket = 0, before = 0;
  while (before + counts[bucket] < k) before += counts[bucket++];
  size_t kept = 0;
  for (const UnixSeconds e : v) {
    v[kept] = e;  // v's front is already read: compacting in place is safe
    kept += ((e - lo) >> shift) == bucket ? 1 : 0;
  }
  const auto nth = v.begin() + static_cast<ptrdiff_t>(k - before - 1);
  std::nth_element(v.begin(), nth, v.begin() + static_cast<ptrdiff_t>(kept));
  return *nth;
}

// TimesFor over `count` segments, the i-th expiring at expiry(i).
template <typename Expiry>
RecordTimes TimesOf(size_t count, Expiry expiry, double share,
                    std::span<const UnixSeconds> fields) {
  RecordTimes t;
  const size_t n = count + fields.size();
  if (n == 0) return t;
  std::vector<UnixSeconds> exp;
  exp.reserve(n);
  bool never = false;
  UnixSeconds lo = UINT32_MAX, hi = 0;
  auto add = [&](UnixSeconds e) {
    if (e == kNever) {
      never = true;
    } else {
      exp.push_back(e);
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
  };
  for (size_t i = 0; i < count; ++i) add(expiry(i));
  for (const UnixSeconds e : fields) add(e);
  if (!never) t.void_at = hi;
  // The k-th expiry, k = ceil(share * n): by then `share` of them are gone.
  size_t k = static_cast<size_t>(std::ceil(share * static_cast<double>(n)));
  k = std::clamp<size_t>(k, 1, n);
  if (k <= exp.size()) t.sweep_at = KthSmallest(exp, k, lo, hi);
  return t;
}

}  // namespace

bool ListsLive(const Group& g, std::string_view user, UnixSeconds now) {
  auto it = std::lower_bound(g.members.begin(), g.members.end(), user,
                             [](const GroupMember& m, std::string_view u) { return m.user < u; });
  return it != g.members.end() && it->user == user && Alive(it->expires_at, now);
}

RecordTimes TimesFor(std::span<const Segment> segments, double share,
                     std::span<const UnixSeconds> fields) {
  return TimesOf(
      segments.size(), [&](size_t i) { return segments[i].expires_at; }, share, fields);
}

RecordTimes TimesFor(std::span<const UnixSeconds> segment_expiries, double share,
                     std::span<const UnixSeconds> fields) {
  return TimesOf(
      segment_expiries.size(), [&](size_t i) { return segment_expiries[i]; }, share, fields);
}

}  // namespace segstore::profile
