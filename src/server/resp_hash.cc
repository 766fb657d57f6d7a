// The RESP port's hash commands (proto/RESP.md, "Hashes"), members of
// RespConnection: Redis 7.4's hash with per-field expiry, mapped onto a
// profile. Each is one request of the binary protocol; the reply is made
// from its answer.
#include <fmt/format.h>

#include <algorithm>

#include "proto/wire.h"
#include "server/resp_connection.h"

namespace segstore::server {

namespace {

constexpr uint8_t kNotFound = static_cast<uint8_t>(Status::Code::kNotFound);

// The row of segment `id` in `r` (ascending IDs), or r.size().
size_t RowOf(const GetResult& r, uint64_t id) {
  const auto it = std::lower_bound(r.ids.begin(), r.ids.end(), id);
  return it != r.ids.end() && *it == id ? static_cast<size_t>(it - r.ids.begin()) : r.size();
}

std::string ValueOf(const GetResult& r, size_t row) {
  std::string v;
  AppendFieldValue(r.attr1.empty() ? std::nullopt : r.attr1[row],
                   r.attr2.empty() ? std::nullopt : r.attr2[row], &v);
  return v;
}

// HMGET's reply: the value of each field of `ids` in `r` (null when the user
// has no profile), null for a field it does not have.
void WriteValues(const GetResult* r, std::span<const uint64_t> ids, proto::RespWriter* w) {
  const size_t n = r == nullptr ? 0 : r->size();
  w->Array(ids.size());
  for (uint64_t id : ids) {
    const size_t row = r == nullptr ? 0 : RowOf(*r, id);
    if (row >= n) {
      w->Null();
    } else {
      w->Bulk(ValueOf(*r, row));
    }
  }
}

}  // namespace

void RespConnection::AskGet(Pending& p, std::string_view user, const GetOptions& o,
                            std::function<void(Pending&, const GetResult*)> then) {
  proto::GetRequest req;
  req.user = std::string(user);
  req.options = o;
  Call<GetResult>(
      p, proto::Op::kGet, std::move(req),
      [then](Pending& q, const GetResult& r, const proto::FrameHeader&) { then(q, &r); },
      [then](Pending& q) { then(q, nullptr); });
}

void RespConnection::HashRead(RespCmd cmd, RespArgs args, Pending& p) {
  std::vector<uint64_t> ids;
  Status parsed;
  switch (cmd) {
    case RespCmd::kHget:
      ids.resize(1);
      parsed = ParseField(args, 2, &ids[0]);
      break;
    case RespCmd::kHmget:
      ids.resize(args.size() - 2);
      for (size_t i = 2; i < args.size() && parsed.ok(); ++i)
        parsed = ParseField(args, i, &ids[i - 2]);
      break;
    case RespCmd::kHttl:
    case RespCmd::kHpttl:
    case RespCmd::kHexpiretime:
    case RespCmd::kHpexpiretime:
      parsed = ParseFieldsClause(args, 2, &ids);
      break;
    default:  // the whole hash
      break;
  }
  if (!parsed.ok()) return ReplyError(p, "ERR", parsed.message());
  GetOptions o;
  if (!ids.empty()) {
    const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
    o.id_from = *lo;
    o.id_to = *hi;
  }
  o.ids_only = cmd == RespCmd::kHkeys;
  AskGet(p, args[1], o, [this, cmd, ids = std::move(ids)](Pending& q, const GetResult* r) {
    proto::RespWriter w = Writer(q);
    const size_t n = r == nullptr ? 0 : r->size();
    switch (cmd) {
      case RespCmd::kHget: {
        const size_t row = r == nullptr ? 0 : RowOf(*r, ids[0]);
        if (row >= n) return w.Null();
        return w.Bulk(ValueOf(*r, row));
      }
      case RespCmd::kHmget:
        return WriteValues(r, ids, &w);
      case RespCmd::kHgetall:
        w.Map(n);
        if (n > 0 && r->attr1.empty() && r->attr2.empty()) {
          // No segment has attributes (the usual profile): every value is "".
          w.Reserve(n * 32);
          w.BulkNumbers(r->ids, "$0\r\n\r\n");
          return;
        }
        for (size_t i = 0; i < n; ++i) {
          w.BulkNumber(r->ids[i]);
          w.Bulk(ValueOf(*r, i));
        }
        return;
      case RespCmd::kHkeys:
        w.Array(n);
        if (n > 0) w.BulkNumbers(r->ids);
        return;
      case RespCmd::kHvals:
        w.Array(n);
        for (size_t i = 0; i < n; ++i) w.Bulk(ValueOf(*r, i));
        return;
      default:
        break;
    }
    // HTTL, HPTTL, HEXPIRETIME, HPEXPIRETIME: -2 absent, -1 never.
    const int64_t now = clock_->Now();
    w.Array(ids.size());
    for (uint64_t id : ids) {
      const size_t row = r == nullptr ? 0 : RowOf(*r, id);
      if (row >= n) {
        w.Integer(-2);
        continue;
      }
      const int64_t at = r->expires[row];
      if (at == kNever) {
        w.Integer(-1);
      } else if (cmd == RespCmd::kHttl) {
        w.Integer(std::max<int64_t>(at - now, 0));
      } else if (cmd == RespCmd::kHpttl) {
        w.Integer(std::max<int64_t>(at - now, 0) * 1000);
      } else if (cmd == RespCmd::kHexpiretime) {
        w.Integer(at);
      } else {
        w.Integer(at * 1000);
      }
    }
  });
}

void RespConnection::Hlen(RespArgs args, Pending& p) {
  proto::CountRequest req;
  req.user = std::string(args[1]);
  Call<proto::CountResponse>(
      p, proto::Op::kCount, req,
      [this](Pending& q, const proto::CountResponse& r, const proto::FrameHeader&) {
        Writer(q).Integer(r.count);
      },
      [this](Pending& q) { Writer(q).Integer(0); });
}

void RespConnection::Hexists(RespArgs args, Pending& p) {
  proto::CountRequest req;
  if (Status s = ParseField(args, 2, &req.id_from); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  req.id_to = req.id_from;
  req.user = std::string(args[1]);
  Call<proto::CountResponse>(
      p, proto::Op::kCount, req,
      [this](Pending& q, const proto::CountResponse& r, const proto::FrameHeader&) {
        Writer(q).Integer(r.count > 0 ? 1 : 0);
      },
      [this](Pending& q) { Writer(q).Integer(0); });
}

void RespConnection::Hdel(RespArgs args, Pending& p) {
  proto::RemoveRequest req;
  req.user = std::string(args[1]);
  req.ids.resize(args.size() - 2);
  for (size_t i = 2; i < args.size(); ++i) {
    if (Status s = ParseField(args, i, &req.ids[i - 2]); !s.ok()) {
      return ReplyError(p, "ERR", s.message());
    }
  }
  Call<proto::RemoveResponse>(
      p, proto::Op::kRemove, req,
      [this](Pending& q, const proto::RemoveResponse& r, const proto::FrameHeader&) {
        Writer(q).Integer(r.removed);
      },
      [this](Pending& q) { Writer(q).Integer(0); });
}

void RespConnection::Hset(RespCmd cmd, RespArgs args, Pending& p) {
  proto::UpsertRequest req;
  if (Status s = ParseHashSet(args, clock_->Now(), &req); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  Call<UpsertResult>(p, proto::Op::kUpsert, req,
                     [this, cmd](Pending& q, const UpsertResult& r, const proto::FrameHeader&) {
                       if (cmd == RespCmd::kHmset) return Writer(q).Simple("OK");
                       if (cmd == RespCmd::kHsetex) return Writer(q).Integer(1);
                       Writer(q).Integer(r.inserted);
                     });
}

namespace {

// An expire outcome as HEXPIRE answers it (HPERSIST: `persist`).
int64_t ExpireCode(ExpireOutcome o, bool persist) {
  switch (o) {
    case ExpireOutcome::kMissing:
      return -2;
    case ExpireOutcome::kUnchanged:
      return persist ? -1 : 0;
    case ExpireOutcome::kSet:
      return 1;
    case ExpireOutcome::kRemoved:
      return 2;
  }
  return -2;
}

}  // namespace

void RespConnection::HashExpire(RespCmd cmd, RespArgs args, Pending& p) {
  proto::ExpireRequest req;
  if (Status s = ParseHashExpire(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  const bool persist = cmd == RespCmd::kHpersist;
  const size_t fields = req.ids.size();
  Call<ExpireResult>(
      p, proto::Op::kExpire, req,
      [this, persist, fields](Pending& q, const ExpireResult& r, const proto::FrameHeader&) {
        if (r.results.size() != fields) {  // a duplicate whose first answer is forgotten
          return ReplyError(q, "INDOUBT",
                            "the cluster applied this write before and no longer knows its "
                            "outcome per field");
        }
        proto::RespWriter w = Writer(q);
        w.Array(r.results.size());
        for (ExpireOutcome o : r.results) w.Integer(ExpireCode(o, persist));
      },
      [this, fields](Pending& q) {  // no profile: no field
        proto::RespWriter w = Writer(q);
        w.Array(fields);
        for (size_t i = 0; i < fields; ++i) w.Integer(-2);
      });
}

void RespConnection::Hgetex(RespArgs args, Pending& p) {
  std::vector<uint64_t> ids;
  bool expire = false;
  proto::ExpireRequest req;
  if (Status s = ParseHashGetEx(args, &ids, &expire, &req); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  GetOptions o;
  const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
  o.id_from = *lo;
  o.id_to = *hi;
  // The values first, then (with an option) the expiry: two writes apart.
  AskGet(
      p, args[1], o,
      [this, ids = std::move(ids), expire, req = std::move(req)](Pending& q, const GetResult* r) {
        proto::RespWriter w = Writer(q);
        WriteValues(r, ids, &w);
        if (!expire || r == nullptr || r->size() == 0) return;
        std::string body;  // not scratch(): a request may be being read from it
        proto::Encode(req, &body);
        Ask(q, proto::Op::kExpire, body,
            [this](Pending& e, const proto::FrameHeader& h, std::string_view answer) {
              if (h.status != 0 && h.status != kNotFound) ReplyStatus(e, h, answer);
            });
      });
}

}  // namespace segstore::server
