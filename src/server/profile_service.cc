#include "server/profile_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/clock.h"
#include "profile/field_codec.h"
#include "profile/field_names.h"
#include "profile/scan.h"
#include "proto/wire.h"
#include "replica/bootstrap.h"
#include "replica/checkpoint.h"
#include "replica/entry.h"
#include "server/peer_links.h"

namespace segstore::server {

static_assert(proto::kMaxFieldNameBytes == profile::kMaxFieldNameBytes,
              "the wire and the profile layer agree on the longest field name");

using proto::FrameHeader;
using proto::Op;

namespace {

// scan's page size when the request names none, and the most it may name.
constexpr uint32_t kScanPageBytes = 1u << 20;
constexpr uint32_t kMaxScanPageBytes = 16u << 20;

void ReplyError(const FrameHeader& h, const Status& s, Responder& to) {
  std::string frame;
  proto::AppendErrorFrame(&frame, h.op, h.request_id, s);
  to.Send(std::move(frame));
}

template <typename Message>
void ReplyOk(const FrameHeader& h, const Message& m, Responder& to) {
  std::string frame;
  if (!proto::AppendFrame(&frame, h.op, h.request_id, 0, proto::kMaxResponseBytes,
                          [&](std::string* out) { proto::Encode(m, out); })) {
    ReplyError(h,
               Status::LimitExceeded("the response would be over " +
                                     std::to_string(proto::kMaxResponseBytes) +
                                     " bytes: ask for fewer users, a limit or the ids projection"),
               to);
    return;
  }
  to.Send(std::move(frame));
}

// An operation's error as a client sees it.
Status ClientError(const Status& s) {
  if (s.IsNotFound()) return Status::NotFound("the user has no profile");
  return s;
}

// The callback of a profile operation answering with `convert(value)`.
template <typename T, typename Convert>
auto Answer(const FrameHeader& h, Responder to, Convert convert) {
  return [h, to = std::move(to), convert](Result<T> r) mutable {
    if (!r.ok()) {
      ReplyError(h, ClientError(r.status()), to);
      return;
    }
    ReplyOk(h, convert(std::move(*r)), to);
  };
}

// The answer of a write made through the cluster's log, as `convert` makes
// it from a replica::WriteAnswer.
template <typename Convert>
void ReplyApplied(const FrameHeader& h, const replica::WriteAnswer& a, Responder& to,
                  Convert convert) {
  if (!a.status.ok()) {
    ReplyError(h, ClientError(a.status), to);
    return;
  }
  ReplyOk(h, convert(a), to);
}

template <typename T>
auto AnswerAsIs(const FrameHeader& h, Responder to) {
  return Answer<T>(h, std::move(to), [](T v) { return v; });
}

// A read's outcome: as a value to a responder that takes one (the RESP
// port), else encoded as AnswerAsIs does.
template <typename T>
void ReplyRead(const FrameHeader& h, Result<T> r, Responder& to) {
  if (to.takes_values()) {
    if (!r.ok()) r = Result<T>(ClientError(r.status()));
    to.SendValue(h.request_id, std::move(r));
  } else if (!r.ok()) {
    ReplyError(h, ClientError(r.status()), to);
  } else {
    ReplyOk(h, *r, to);
  }
}

template <typename T>
auto AnswerRead(const FrameHeader& h, Responder to) {
  return [h, to = std::move(to)](Result<T> r) mutable { ReplyRead(h, std::move(r), to); };
}

}  // namespace

class ProfileHandler : public Handler {
 public:
  ProfileHandler(ProfileService* service, std::unique_ptr<profile::ProfileSession> session,
                 std::shared_ptr<LoopPoster> poster)
      : service_(service), session_(std::move(session)), poster_(std::move(poster)) {
    limits_.max_key_bytes = service->store_->max_key_size();
    limits_.max_batch = service->options_.max_batch;
    limits_.max_list = std::max<uint32_t>(service->options_.max_segments, 1);
    if (board_ != nullptr && service->options_.peers != nullptr) {
      group_peers_ = std::make_unique<ClusterPeers>(this);
      session_->SetGroupPeers(group_peers_.get());
    }
  }

  int event_fd() const override { return session_->worker().event_fd(); }
  void OnEvent() override { session_->worker().OnEvent(); }
  void BeginBurst() override { burst_.emplace(session_->worker()); }
  void EndBurst() override { burst_.reset(); }

  void Handle(const FrameHeader& h, std::string_view body, Responder to) override {
    switch (static_cast<Op>(h.op)) {
      case Op::kHello:
        return Hello(h, body, std::move(to));
      case Op::kPing:
        return ReplyPing(h, body, std::move(to));
      case Op::kStats:
        return ReplyStats(h, body, std::move(to));
      case Op::kClusterMap:
        return ReplyClusterMap(h, body, std::move(to));
      case Op::kGet: {
        proto::GetRequest req;
        if (!Read(h, body, &req, to)) return;
        return Get(h, req, std::move(to));
      }
      case Op::kBatchGet: {
        proto::BatchGetRequest req;
        if (!Read(h, body, &req, to)) return;
        return BatchGet(h, std::move(req), std::move(to));
      }
      case Op::kCount:
        return Count(h, body, std::move(to));
      case Op::kUpsert:
        return Upsert(h, body, std::move(to));
      case Op::kBatchUpsert:
        return BatchUpsert(h, body, std::move(to));
      case Op::kRemove:
        return Remove(h, body, std::move(to));
      case Op::kTrim:
        return Trim(h, body, std::move(to));
      case Op::kDelete:
        return Delete(h, body, std::move(to));
      case Op::kExpire:
        return Expire(h, body, std::move(to));
      case Op::kCopyPartition:
        return CopyPartition(h, body, std::move(to));
      case Op::kLink:
        return Link(h, body, std::move(to));
      case Op::kUnlink:
        return Unlink(h, body, std::move(to));
      case Op::kMasterOf:
        return MasterOf(h, body, std::move(to));
      case Op::kLinks:
        return Links(h, body, std::move(to));
      case Op::kConnected:
        return Connected(h, body, std::move(to));
      case Op::kScan:
        return Scan(h, body, std::move(to));
      case Op::kLinkStep:
        return LinkStep(h, body, std::move(to));
      case Op::kReadRecords:
        return ReadRecords(h, body, std::move(to));
      case Op::kFieldSet:
        return FieldSet(h, body, std::move(to));
      case Op::kFieldDelete:
        return FieldDelete(h, body, std::move(to));
      case Op::kFieldIncrement:
        return FieldIncrement(h, body, std::move(to));
      case Op::kFieldMax:
        return FieldMax(h, body, std::move(to));
    }
    ReplyError(h, Status::Unsupported("unknown operation code " + std::to_string(h.op)), to);
  }

  void HandleGet(const FrameHeader& h, proto::GetRequest req, Responder to) override {
    if (!Checked(h, proto::Check(limits_, req), to)) return;
    Get(h, req, std::move(to));
  }

  void HandleBatchGet(const FrameHeader& h, proto::BatchGetRequest req, Responder to) override {
    if (!Checked(h, proto::Check(limits_, &req), to)) return;
    BatchGet(h, std::move(req), std::move(to));
  }

 private:
  // Decodes `body` into *m, or answers the error and returns false.
  template <typename Message>
  bool Read(const FrameHeader& h, std::string_view body, Message* m, Responder& to) {
    return Checked(h, proto::Decode(body, limits_, m), to);
  }
  // True when `s` is OK; else answers it and returns false.
  bool Checked(const FrameHeader& h, const Status& s, Responder& to) {
    if (s.ok()) return true;
    ReplyError(h, s.WithContext(proto::OpName(h.op)), to);
    return false;
  }

  void Hello(const FrameHeader& h, std::string_view body, Responder to) {
    proto::HelloRequest req;
    if (!Read(h, body, &req, to)) return;
    const ProfileServiceOptions& o = service_->options_;
    ServerInfo info;
    info.protocol = proto::kVersion;
    info.server = o.server_name;
    info.max_frame_bytes = o.max_frame_bytes;
    info.max_batch = o.max_batch;
    info.max_key_bytes = limits_.max_key_bytes;
    info.max_segments = o.max_segments;
    info.max_in_flight = o.max_in_flight;
    info.max_fields = o.max_fields;
    info.max_field_bytes = o.max_field_bytes;
    ReplyOk(h, info, to);
  }

  // Ping and stats take no fields, but their body is held to the rule of
  // every body: empty, or a MessagePack map.
  void ReplyPing(const FrameHeader& h, std::string_view body, Responder to) {
    proto::EmptyRequest req;
    if (!Read(h, body, &req, to)) return;
    std::string frame;
    (void)proto::AppendFrame(&frame, h.op, h.request_id, 0, UINT32_MAX, [](std::string*) {});
    to.Send(std::move(frame));
  }

  void ReplyStats(const FrameHeader& h, std::string_view body, Responder to) {
    proto::EmptyRequest req;
    if (!Read(h, body, &req, to)) return;
    ReplyOk(h, service_->CollectStats(), to);
  }

  void ReplyClusterMap(const FrameHeader& h, std::string_view body, Responder to) {
    proto::EmptyRequest req;
    if (!Read(h, body, &req, to)) return;
    if (board_ == nullptr) return ReplyOk(h, ClusterMap{}, to);
    if (replicator_ == nullptr) return ReplyOk(h, View()->map, to);
    ClusterMap map = View()->map;
    map.log = true;
    map.passive = replicator_->passive();
    ReplyOk(h, map, to);
  }

  // One page of a partition this node serves, for a node copying it.
  void CopyPartition(const FrameHeader& h, std::string_view body, Responder to) {
    proto::CopyPartitionRequest req;
    if (!Read(h, body, &req, to)) return;
    if (board_ == nullptr || replicator_ == nullptr) {
      return ReplyError(
          h,
          Status::InvalidArgument("copy_partition needs a cluster node that writes through a log"),
          to);
    }
    // `next` first, then the view: a map taking the partition away after it
    // was read cannot make `next` cover entries skipped for the partition.
    const int64_t next = replicator_->applier()->AppliedNext(req.partition);
    const std::shared_ptr<const cluster::ClusterView> v = board_->view();
    if (!v->serving || !v->map.has_map()) {
      return ReplyError(
          h, Status::Busy("copy_partition: this node serves no partition yet; retry later"), to);
    }
    if (!v->held.test(req.partition)) {
      std::string frame;
      proto::AppendWrongNodeFrame(
          &frame, h.op, h.request_id,
          "copy_partition: " + std::string(NotHeld(req.partition, v->map.revision, "").message()),
          v->map.revision);
      return to.Send(std::move(frame));
    }
    if (!replicator_->caught_up() || next < 0 || replicator_->Stale(req.partition)) {
      return ReplyError(
          h, Status::Busy("copy_partition: this node is not caught up with the log; retry shortly"),
          to);
    }
    if (static_cast<uint64_t>(next) < req.min_next) {
      return ReplyError(h,
                        Status::Busy(fmt::format("copy_partition: log partition {} is applied up "
                                                 "to {}, below min_next {}; retry shortly",
                                                 req.partition % replicator_->log_partitions(),
                                                 next, req.min_next)),
                        to);
    }
    // Half a frame of records at most: the answer's own encoding adds to them.
    const uint32_t cap = service_->options_.max_frame_bytes / 2;
    const uint32_t max_bytes = req.max_bytes == 0 ? cap : std::min(req.max_bytes, cap);
    replica::ReadPartitionPage(
        *service_->store_, service_->profiles_, session_->worker(), req.partition, req.cursor,
        max_bytes, [h, to = std::move(to), next](Result<CopyPartitionResponse> page) mutable {
          if (!page.ok()) return ReplyError(h, page.status().WithContext("copy_partition"), to);
          page->next = static_cast<uint64_t>(next);
          ReplyOk(h, *page, to);
        });
  }

  // One page of a partition's profiles, decoded, for a client reading them
  // all (backups, exports): from a single server, or from any node serving
  // the partition (PROTOCOL.md, "scan").
  void Scan(const FrameHeader& h, std::string_view body, Responder to) {
    proto::ScanRequest req;
    if (!Read(h, body, &req, to)) return;
    bool stale = false;
    if (board_ != nullptr) {
      const cluster::ClusterView* v = View();
      if (!v->serving || !v->map.has_map()) {
        return ReplyError(h,
                          Status::Busy(!v->serving ? "scan: this node is not serving yet: it is "
                                                     "joining the cluster (registering with etcd); "
                                                     "retry later"
                                                   : "scan: the cluster has no partition map yet; "
                                                     "retry later"),
                          to);
      }
      if (!v->held.test(req.partition)) {
        std::string frame;
        proto::AppendWrongNodeFrame(
            &frame, h.op, h.request_id,
            "scan: " + std::string(NotHeld(req.partition, v->map.revision, "; ask cluster_map")
                                       .message()),
            v->map.revision);
        return to.Send(std::move(frame));
      }
      stale = LeaseLate() || (replicator_ != nullptr && replicator_->Stale(req.partition));
    }
    // Half a frame at most (as copy_partition's pages), and 16 MiB: what a
    // client asks for never makes the server hold more.
    const uint32_t cap =
        std::max<uint32_t>(std::min(service_->options_.max_frame_bytes / 2, kMaxScanPageBytes), 1);
    const uint32_t max_bytes = std::min(req.max_bytes == 0 ? kScanPageBytes : req.max_bytes, cap);
    // Decoded profiles take about five times their stored bytes: list a
    // quarter of the page's bytes, then cut the decoded page to size.
    const uint32_t list_bytes = std::max<uint32_t>(max_bytes / 4, 1);
    const UnixSeconds now = service_->store_->clock().Now();
    replica::ReadPartitionRecords(
        *service_->store_, session_->worker(), req.partition, req.cursor, list_bytes,
        [h, to = MarkStale(std::move(to), stale), now, max_bytes,
         names = &profile::FieldNamesOf(*service_->profiles_)](
            Result<replica::PartitionRecords> listed) mutable {
          if (!listed.ok()) return ReplyError(h, listed.status().WithContext("scan"), to);
          std::vector<std::optional<ScannedProfile>> decoded(listed->records.size());
          // Decoded no further than the page holds: once the decoded bytes
          // pass max_bytes, decoding stops at the next tag (the page is cut
          // there), so records that decode far larger than stored are never
          // all held at once.
          const size_t budget = max_bytes - std::min<size_t>(max_bytes, proto::kScanPageOverhead);
          size_t decoded_bytes = 0;
          size_t read = listed->records.size();
          for (size_t i = 0; i < listed->records.size(); ++i) {
            if (i > 0 && decoded_bytes > budget &&
                listed->records[i].tag != listed->records[i - 1].tag) {
              read = i;
              break;
            }
            const storage::Record& r = listed->records[i].record;
            ScannedProfile p;
            Result<bool> live = profile::ScanRecord(r.key(), r.body(), r.reference(), *names, now, &p);
            if (!live.ok()) {
              return ReplyError(h,
                                Status::Corruption("scan: the record of user '" +
                                                   PrintableUser(r.key()) + "' is damaged: " +
                                                   std::string(live.status().message())),
                                to);
            }
            if (*live) {
              decoded_bytes += proto::ScannedProfileBytes(p);
              decoded[i] = std::move(p);
            }
          }
          proto::ScanResponse page;
          page.cursor = listed->cursor;
          const size_t cut = replica::CutAtTags(
              listed->records, budget,
              [&](size_t i) -> size_t {
                if (i >= read) return budget + 1;  // not decoded: the page ends before it
                return decoded[i].has_value() ? proto::ScannedProfileBytes(*decoded[i]) : 0;
              },
              &page.cursor);
          for (size_t i = 0; i < cut; ++i) {
            if (decoded[i].has_value()) page.profiles.push_back(std::move(*decoded[i]));
          }
          ReplyOk(h, page, to);
        });
  }

  // A user ID for a message: printable ASCII as is, other bytes as \xNN.
  static std::string PrintableUser(std::string_view user) {
    std::string out;
    for (const char ch : user.substr(0, 64)) {
      const auto c = static_cast<unsigned char>(ch);
      if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
        out.push_back(ch);
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
    }
    if (user.size() > 64) out += "...";
    return out;
  }

  // The cluster view, picked up again only when the board published another.
  const cluster::ClusterView* View() {
    const uint64_t generation = board_->generation();
    if (generation != view_generation_) {
      view_ = board_->view();
      view_generation_ = generation;
    }
    return view_.get();
  }

  static Status Reserved() {
    return Status::InvalidArgument(
        "user: IDs beginning with the bytes FF 00 are reserved (the server's own records)");
  }

  static Status NotHeld(uint32_t partition, uint64_t revision, std::string_view hint) {
    return Status::WrongNode("partition " + std::to_string(partition) +
                             " is not held by this node (map revision " + std::to_string(revision) +
                             ")" + std::string(hint));
  }

  // OK when this node serves `user` now; else the error to answer for it
  // (WrongNode with the map's revision, or Busy while serving nothing).
  // `revision` gets the map's revision.
  Status Placement(std::string_view user, uint64_t* revision) {
    if (replica::IsReservedKey(user)) return Reserved();
    const cluster::ClusterView* v = View();
    *revision = v->map.revision;
    if (!v->serving || !v->map.has_map()) {
      return Status::Busy(!v->serving ? "this node is not serving yet: it is joining the cluster "
                                        "(registering with etcd); retry later"
                                      : "the cluster has no partition map yet; retry later");
    }
    const uint32_t partition = PartitionOf(user);
    if (v->held.test(partition)) return Status::OK();
    return NotHeld(partition, v->map.revision, "; ask cluster_map");
  }

  // True when this node serves `user`; else answers the error and returns false.
  bool Serves(const FrameHeader& h, std::string_view user, Responder& to) {
    if (board_ == nullptr) return true;
    uint64_t revision = 0;
    Status s = Placement(user, &revision);
    if (s.ok()) return true;
    std::string frame;
    if (s.code() == Status::Code::kWrongNode) {
      proto::AppendWrongNodeFrame(
          &frame, h.op, h.request_id,
          std::string(proto::OpName(h.op)) + ": " + std::string(s.message()), revision);
    } else {
      proto::AppendErrorFrame(&frame, h.op, h.request_id, s.WithContext(proto::OpName(h.op)));
    }
    to.Send(std::move(frame));
    return false;
  }

  // For a batch of n entries: marks each entry whose user this node does not
  // serve WrongNode in *rejected (sizing it to n when it was empty) and
  // returns true; while the node serves nothing, answers the frame Busy and
  // returns false.
  template <typename UserOf>
  bool SplitByPlacement(const FrameHeader& h, size_t n, UserOf user_of,
                        std::vector<Status>* rejected, Responder& to) {
    if (board_ == nullptr || n == 0) return true;
    const cluster::ClusterView* v = View();
    if (!v->serving || !v->map.has_map()) return Serves(h, user_of(0), to);  // the frame's Busy
    for (size_t i = 0; i < n; ++i) {
      if (!rejected->empty() && !(*rejected)[i].ok()) continue;
      const std::string_view user = user_of(i);
      const uint32_t partition = PartitionOf(user);
      const bool reserved = replica::IsReservedKey(user);
      if (!reserved && v->held.test(partition)) continue;
      if (rejected->empty()) rejected->resize(n);
      (*rejected)[i] = reserved ? Reserved() : NotHeld(partition, v->map.revision, "");
    }
    return true;
  }

  // Reads: the answer frame says stale (flags bit 0) when this node's lease
  // is older than its TTL (asked once a request: a clock read), or the
  // replicator judges the partition of any user read may be behind the log.
  bool LeaseLate() const { return board_ != nullptr && board_->LeaseLate(); }
  bool Stale(std::string_view user) const {
    return replicator_ != nullptr && replicator_->Stale(PartitionOf(user));
  }
  static Responder MarkStale(Responder to, bool stale) {
    if (stale) to.set_flags(proto::kFlagStale);
    return to;
  }

  // A passive cluster's node answers every write ReadOnly, before looking
  // at its user: the answer is the same whichever node it reached.
  bool RefusedAsPassive(const FrameHeader& h, Responder& to) {
    if (replicator_ == nullptr || !replicator_->passive()) return false;
    ReplyError(h, replica::PassiveRefusal(), to);
    return true;
  }

  // Sends `request` to the cluster's log as a write taken at `now`;
  // `answered(answer)` runs on this loop once this node applied it (or the
  // log refused it).
  template <typename Request, typename Answered>
  void Submit(UnixSeconds now, Request request, Answered answered) {
    replica::WriteEntry entry;
    entry.now = now;
    entry.write_id = request.write_id;
    request.write_id = WriteId{};
    entry.request = std::move(request);
    replicator_->Submit(std::move(entry), [poster = poster_, answered = std::move(answered)](
                                              const replica::WriteAnswer& a) mutable {
      poster->Post([answered, a]() mutable { answered(a); });
    });
  }

  // A get, its request checked.
  void Get(const FrameHeader& h, const proto::GetRequest& req, Responder to) {
    if (!Serves(h, req.user, to)) return;
    const bool stale = LeaseLate() || Stale(req.user);
    if (req.options.fields.mode == FieldSelection::Mode::kNone) {
      session_->Get(req.user, req.options,
                    AnswerRead<GetResult>(h, MarkStale(std::move(to), stale)));
      return;
    }
    // The answer carries "fields" (even empty) when fields were asked.
    session_->Get(req.user, req.options,
                  [h, to = MarkStale(std::move(to), stale)](Result<GetResult> r) mutable {
                    if (r.ok()) r->fields_asked = true;
                    ReplyRead(h, std::move(r), to);
                  });
  }

  // A batch get, its request checked. Users whose ID was rejected get their
  // error in place; the rest are read.
  void BatchGet(const FrameHeader& h, proto::BatchGetRequest req, Responder to) {
    if (!SplitByPlacement(
            h, req.users.size(), [&](size_t i) -> std::string_view { return req.users[i]; },
            &req.rejected, to)) {
      return;
    }
    bool stale = LeaseLate();
    for (size_t i = 0; i < req.users.size() && replicator_ != nullptr && !stale; ++i) {
      stale = (req.rejected.empty() || req.rejected[i].ok()) && Stale(req.users[i]);
    }
    to = MarkStale(std::move(to), stale);
    const bool fields_asked = req.options.fields.mode != FieldSelection::Mode::kNone;
    if (req.rejected.empty()) {
      if (!fields_asked) {
        session_->BatchGet(req.users, req.options, AnswerRead<BatchGetResult>(h, std::move(to)));
        return;
      }
      session_->BatchGet(req.users, req.options,
                         [h, to = std::move(to)](Result<BatchGetResult> r) mutable {
                           MarkFieldsAsked(&r);
                           ReplyRead(h, std::move(r), to);
                         });
      return;
    }
    std::vector<std::string> valid;
    for (size_t i = 0; i < req.users.size(); ++i) {
      if (req.rejected[i].ok()) valid.push_back(std::move(req.users[i]));
    }
    session_->BatchGet(valid, req.options,
                       [h, to = std::move(to), rejected = std::move(req.rejected),
                        fields_asked](Result<BatchGetResult> r) mutable {
                         if (!r.ok()) return ReplyRead(h, std::move(r), to);
                         if (fields_asked) MarkFieldsAsked(&r);
                         BatchGetResult all;
                         all.reserve(rejected.size());
                         size_t next = 0;
                         for (const Status& s : rejected) {
                           all.push_back(s.ok() ? std::move((*r)[next++]) : Result<GetResult>(s));
                         }
                         ReplyRead(h, Result<BatchGetResult>(std::move(all)), to);
                       });
  }

  // Every user's answer of a batch get that asked for fields says so.
  static void MarkFieldsAsked(Result<BatchGetResult>* r) {
    if (!r->ok()) return;
    for (Result<GetResult>& one : **r) {
      if (one.ok()) one->fields_asked = true;
    }
  }

  void Count(const FrameHeader& h, std::string_view body, Responder to) {
    proto::CountRequest req;
    if (!Read(h, body, &req, to)) return;
    if (!Serves(h, req.user, to)) return;
    const bool stale = LeaseLate() || Stale(req.user);
    session_->Count(req.user, req.id_from, req.id_to,
                    Answer<uint32_t>(h, MarkStale(std::move(to), stale),
                                     [](uint32_t n) { return proto::CountResponse{n}; }));
  }

  void Upsert(const FrameHeader& h, std::string_view body, Responder to) {
    proto::UpsertRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to)) return;
    if (!Serves(h, req.user, to)) return;
    if (replicator_ != nullptr) {
      // One reading of the clock: what the check passed is what every
      // replica applies the write at.
      const UnixSeconds now = service_->store_->clock().Now();
      Status s = profile::CheckUpsert(req.segments, req.mode, now);
      if (!s.ok()) return ReplyError(h, s, to);
      return Submit(
          now, std::move(req), [h, to = std::move(to)](const replica::WriteAnswer& a) mutable {
            ReplyApplied(h, a, to, [](const replica::WriteAnswer& x) { return x.upsert; });
          });
    }
    session_->Upsert(req.user, req.segments, req.options(),
                     AnswerAsIs<UpsertResult>(h, std::move(to)));
  }

  // Every user's upsert is started at once (their reads go to the device
  // together); the answer goes when the last completes.
  void BatchUpsert(const FrameHeader& h, std::string_view body, Responder to) {
    proto::BatchUpsertRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to)) return;
    if (!SplitByPlacement(
            h, req.items.size(), [&](size_t i) -> std::string_view { return req.items[i].user; },
            &req.rejected, to)) {
      return;
    }
    struct Join {
      BatchUpsertResult results;
      size_t remaining = 0;
      FrameHeader header;
      Responder to;
    };
    auto join = std::make_shared<Join>(
        Join{BatchUpsertResult(req.items.size(), Status::Internal("pending")), req.items.size(), h,
             std::move(to)});
    for (size_t i = 0; i < req.rejected.size(); ++i) {
      if (req.rejected[i].ok()) continue;
      join->results[i] = req.rejected[i];  // failed alone: answered as it is
      --join->remaining;
    }
    if (join->remaining == 0) {
      ReplyOk(h, join->results, join->to);
      return;
    }
    if (replicator_ != nullptr) {
      // One log entry per item (each goes to its own user's log partition);
      // the answer goes once this node applied the last.
      const UnixSeconds now = service_->store_->clock().Now();
      for (size_t i = 0; i < req.items.size(); ++i) {
        if (!req.rejected.empty() && !req.rejected[i].ok()) continue;
        if (Status s = profile::CheckUpsert(req.items[i].segments, req.items[i].mode, now);
            !s.ok()) {
          join->results[i] = std::move(s);
          if (--join->remaining == 0) ReplyOk(h, join->results, join->to);
          continue;
        }
        Submit(now, std::move(req.items[i]), [join, i](const replica::WriteAnswer& a) {
          join->results[i] = a.status.ok() ? Result<UpsertResult>(a.upsert)
                                           : Result<UpsertResult>(ClientError(a.status));
          if (--join->remaining == 0) ReplyOk(join->header, join->results, join->to);
        });
      }
      return;
    }
    storage::Worker::Batch batch(session_->worker());
    for (size_t i = 0; i < req.items.size(); ++i) {
      if (!req.rejected.empty() && !req.rejected[i].ok()) continue;
      const proto::UpsertRequest& item = req.items[i];
      session_->Upsert(item.user, item.segments, item.options(), [join, i](Result<UpsertResult> r) {
        join->results[i] = std::move(r);
        if (--join->remaining == 0) ReplyOk(join->header, join->results, join->to);
      });
    }
  }

  void Remove(const FrameHeader& h, std::string_view body, Responder to) {
    proto::RemoveRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to)) return;
    if (!Serves(h, req.user, to)) return;
    if (replicator_ != nullptr) {
      return Submit(service_->store_->clock().Now(), std::move(req),
                    [h, to = std::move(to)](const replica::WriteAnswer& a) mutable {
                      ReplyApplied(h, a, to, [](const replica::WriteAnswer& x) {
                        return proto::RemoveResponse{x.removed, x.duplicate};
                      });
                    });
    }
    session_->Remove(req.user, req.ids, Answer<uint32_t>(h, std::move(to), [](uint32_t n) {
                       return proto::RemoveResponse{n};
                     }));
  }

  void Trim(const FrameHeader& h, std::string_view body, Responder to) {
    proto::TrimRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to)) return;
    if (!Serves(h, req.user, to)) return;
    if (replicator_ != nullptr) {
      return Submit(service_->store_->clock().Now(), std::move(req),
                    [h, to = std::move(to)](const replica::WriteAnswer& a) mutable {
                      ReplyApplied(h, a, to, [](const replica::WriteAnswer& x) { return x.trim; });
                    });
    }
    session_->Trim(req.user, req.before, AnswerAsIs<TrimResult>(h, std::move(to)));
  }

  void Delete(const FrameHeader& h, std::string_view body, Responder to) {
    proto::DeleteRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to)) return;
    if (!Serves(h, req.user, to)) return;
    if (group_peers_ != nullptr) {
      // A grouped user's delete is its group's steps (a master's deletes
      // its group), coordinated here; any other is a plain delete entry.
      const std::string user = req.user;  // req moves into the callback
      session_->Grouped(
          user, [this, h, req = std::move(req), to = std::move(to)](Result<bool> grouped) mutable {
            if (!grouped.ok()) return ReplyError(h, grouped.status(), to);
            if (!*grouped && replicator_ != nullptr) return SubmitDelete(h, std::move(req), to);
            session_->Delete(req.user, Answer<bool>(h, std::move(to), [](bool existed) {
                               return proto::DeleteResponse{existed};
                             }));
          });
      return;
    }
    if (replicator_ != nullptr) return SubmitDelete(h, std::move(req), to);
    session_->Delete(req.user, Answer<bool>(h, std::move(to), [](bool existed) {
                       return proto::DeleteResponse{existed};
                     }));
  }

  void SubmitDelete(const FrameHeader& h, proto::DeleteRequest req, Responder& to) {
    Submit(service_->store_->clock().Now(), std::move(req),
           [h, to = std::move(to)](const replica::WriteAnswer& a) mutable {
             ReplyApplied(h, a, to, [](const replica::WriteAnswer& x) {
               return proto::DeleteResponse{x.deleted, x.duplicate};
             });
           });
  }

  void Expire(const FrameHeader& h, std::string_view body, Responder to) {
    proto::ExpireRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to)) return;
    if (!Serves(h, req.user, to)) return;
    if (replicator_ != nullptr) {
      // As Upsert: the TTL is checked at the time every replica applies it at.
      const UnixSeconds now = service_->store_->clock().Now();
      Status s = profile::CheckExpire(req.spec(), now);
      if (!s.ok()) return ReplyError(h, s, to);
      return Submit(now, std::move(req),
                    [h, to = std::move(to)](const replica::WriteAnswer& a) mutable {
                      ReplyApplied(h, a, to, [](const replica::WriteAnswer& x) {
                        ExpireResult r = x.expire;
                        r.duplicate = x.duplicate;
                        return r;
                      });
                    });
    }
    session_->Expire(req.user, req.ids, req.spec(), AnswerAsIs<ExpireResult>(h, std::move(to)));
  }

  // ---- Profile fields (PROTOCOL.md, "Profile fields"). A single server
  // applies a write at once (the profile layer sends a linked user's to its
  // master's record). A cluster node first finds the record the write
  // changes: the user's own, or its master's when the user is a linked
  // member; it logs a write of its own records (answered once applied
  // here), and sends a write of a master another node holds there, as that
  // master's write with the client's write ID (so a retry is applied once).
  // Log entries name their record: replicas never redirect them.
  template <typename Request>
  bool ReadFieldWrite(const FrameHeader& h, std::string_view body, Request* req, Responder& to) {
    if (!Read(h, body, req, to)) return false;
    if (RefusedAsPassive(h, to)) return false;
    if (board_ == nullptr) return true;
    if (RefusedInCluster(h, "fields", to)) return false;
    return Serves(h, req->user, to);
  }

  // A cluster node's field write of req.user: see above. `check(now)` is
  // what the profile layer would refuse, run first with the time the write
  // is taken at (as upsert's: a refused write never reaches the log);
  // `apply(req, done)` writes a record this node holds without a log;
  // `send(req, done)` sends it to the node holding req.user; `field` reads
  // the answer from a log entry's.
  template <typename Request, typename T, typename Check, typename Apply, typename Send,
            typename Field>
  void FieldWriteInCluster(const FrameHeader& h, Request req, Responder to, Check check,
                           Apply apply, Send send, Field field) {
    const UnixSeconds now = service_->store_->clock().Now();
    if (Status s = check(req, now); !s.ok()) return ReplyError(h, s, to);
    const std::string user = req.user;
    session_->FieldTarget(user, [this, h, now, req = std::move(req), to = std::move(to), apply,
                                 send, field](Result<std::string> target) mutable {
      if (!target.ok()) return ReplyError(h, target.status(), to);
      req.user = std::move(*target);
      if (!group_peers_->Holds(req.user)) {
        auto done = [poster = poster_, h, to = std::move(to)](Result<T> r) mutable {
          poster->Post([h, r = std::move(r), to = std::move(to)]() mutable {
            if (!r.ok()) return ReplyError(h, ClientError(r.status()), to);
            ReplyOk(h, *r, to);
          });
        };
        return send(std::move(req), std::move(done));
      }
      if (replicator_ == nullptr) return apply(req, AnswerAsIs<T>(h, std::move(to)));
      Submit(now, std::move(req),
             [h, to = std::move(to), field](const replica::WriteAnswer& a) mutable {
               ReplyApplied(h, a, to, [field](const replica::WriteAnswer& x) {
                 T r = field(x);
                 r.duplicate = x.duplicate;
                 return r;
               });
             });
    });
  }

  PeerLinks& peers() { return *service_->options_.peers; }
  // The field limits the profile store was opened with.
  profile::ProfileOptions FieldLimits() const {
    profile::ProfileOptions o;
    o.max_fields = service_->options_.max_fields;
    o.max_field_bytes = service_->options_.max_field_bytes;
    return o;
  }

  void FieldSet(const FrameHeader& h, std::string_view body, Responder to) {
    proto::FieldSetRequest req;
    if (!ReadFieldWrite(h, body, &req, to)) return;
    auto apply = [this](const proto::FieldSetRequest& r, profile::Callback<FieldWriteResult> done) {
      session_->FieldSet(profile::WriteContext{}, r.user, r.fields, std::move(done));
    };
    if (board_ == nullptr) return apply(req, AnswerAsIs<FieldWriteResult>(h, std::move(to)));
    FieldWriteInCluster<proto::FieldSetRequest, FieldWriteResult>(
        h, std::move(req), std::move(to),
        [this](const proto::FieldSetRequest& r, UnixSeconds now) {
          return profile::CheckFieldSet(r.fields, now, FieldLimits());
        },
        apply,
        [this](proto::FieldSetRequest r, auto done) { peers().SendFieldSet(std::move(r), done); },
        [](const replica::WriteAnswer& a) { return a.field_write; });
  }

  void FieldDelete(const FrameHeader& h, std::string_view body, Responder to) {
    proto::FieldDeleteRequest req;
    if (!ReadFieldWrite(h, body, &req, to)) return;
    auto apply = [this](const proto::FieldDeleteRequest& r,
                        profile::Callback<FieldWriteResult> done) {
      session_->FieldDelete(profile::WriteContext{}, r.user, r.names, std::move(done));
    };
    if (board_ == nullptr) return apply(req, AnswerAsIs<FieldWriteResult>(h, std::move(to)));
    FieldWriteInCluster<proto::FieldDeleteRequest, FieldWriteResult>(
        h, std::move(req), std::move(to),
        [](const proto::FieldDeleteRequest& r, UnixSeconds) {
          return profile::CheckFieldDelete(r.names);
        },
        apply,
        [this](proto::FieldDeleteRequest r, auto done) {
          peers().SendFieldDelete(std::move(r), done);
        },
        [](const replica::WriteAnswer& a) { return a.field_write; });
  }

  void FieldIncrement(const FrameHeader& h, std::string_view body, Responder to) {
    proto::FieldIncrementRequest req;
    if (!ReadFieldWrite(h, body, &req, to)) return;
    auto apply = [this](const proto::FieldIncrementRequest& r,
                        profile::Callback<IncrementResult> done) {
      session_->FieldIncrement(profile::WriteContext{}, r.user, r.increment, std::move(done));
    };
    if (board_ == nullptr) return apply(req, AnswerAsIs<IncrementResult>(h, std::move(to)));
    FieldWriteInCluster<proto::FieldIncrementRequest, IncrementResult>(
        h, std::move(req), std::move(to),
        [](const proto::FieldIncrementRequest& r, UnixSeconds now) {
          return profile::CheckFieldIncrement(r.increment, now);
        },
        apply,
        [this](proto::FieldIncrementRequest r, auto done) {
          peers().SendFieldIncrement(std::move(r), done);
        },
        [](const replica::WriteAnswer& a) { return a.increment; });
  }

  void FieldMax(const FrameHeader& h, std::string_view body, Responder to) {
    proto::FieldMaxRequest req;
    if (!ReadFieldWrite(h, body, &req, to)) return;
    auto apply = [this](const proto::FieldMaxRequest& r, profile::Callback<FieldMaxResult> done) {
      session_->FieldMax(profile::WriteContext{}, r.user, r.field, std::move(done));
    };
    if (board_ == nullptr) return apply(req, AnswerAsIs<FieldMaxResult>(h, std::move(to)));
    FieldWriteInCluster<proto::FieldMaxRequest, FieldMaxResult>(
        h, std::move(req), std::move(to),
        [this](const proto::FieldMaxRequest& r, UnixSeconds now) {
          return profile::CheckFieldMax(r.field, now, FieldLimits());
        },
        apply,
        [this](proto::FieldMaxRequest r, auto done) { peers().SendFieldMax(std::move(r), done); },
        [](const replica::WriteAnswer& a) { return a.field_max; });
  }

  // ---- Profile bridging (PROTOCOL.md, "Linked profiles"). On a cluster
  // node the session reaches the records and steps of other nodes' users
  // through ClusterPeers; links are refused until every node of the map
  // runs a build that applies their log entries.
  bool RefusedInCluster(const FrameHeader& h, std::string_view feature, Responder& to) {
    if (board_ == nullptr) return false;
    std::string without;
    Status s;
    if (group_peers_ == nullptr) {
      s = Status::Unsupported(std::string(proto::OpName(h.op)) +
                              ": this cluster node cannot reach its peers for " +
                              std::string(feature));
    } else if (!cluster::EveryNodeHas(View()->map, feature, &without)) {
      s = Status::Unsupported(std::string(proto::OpName(h.op)) + ": node " + without +
                              " of the cluster runs a build without " + std::string(feature) +
                              (feature == "links" ? "; links are made" : "; fields are written") +
                              " once every node is upgraded");
    }
    if (s.ok()) return false;
    ReplyError(h, s, to);
    return true;
  }

  // Profile bridging on a cluster node: the view says which users this
  // node holds; the records and steps of the others go through PeerLinks,
  // whose answers are posted back to this loop.
  class ClusterPeers final : public profile::GroupPeers {
   public:
    explicit ClusterPeers(ProfileHandler* handler) : h_(handler) {}
    bool Holds(std::string_view user) override {
      return !replica::IsReservedKey(user) && h_->View()->Serves(PartitionOf(user));
    }
    void Read(std::vector<std::string> users,
              profile::Callback<std::vector<Result<StoredRecord>>> done) override {
      h_->service_->options_.peers->ReadRecords(
          std::move(users), [poster = h_->poster_, done = std::move(done)](
                                Result<std::vector<Result<StoredRecord>>> r) mutable {
            poster->Post(
                [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
          });
    }
    void Step(const segstore::LinkStep& step, profile::Callback<LinkStepResult> done) override {
      if (Holds(step.user)) return h_->StepHere(step, std::move(done));
      h_->service_->options_.peers->SendLinkStep(
          step, [poster = h_->poster_, done = std::move(done)](Result<LinkStepResult> r) mutable {
            poster->Post(
                [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
          });
    }

   private:
    ProfileHandler* h_;
  };

  // A step on a record this node holds: through the log (answered once
  // applied here), or applied here in a cluster without one.
  void StepHere(const segstore::LinkStep& step, profile::Callback<LinkStepResult> done) {
    if (replicator_ == nullptr) {
      session_->ApplyLinkStep(profile::WriteContext{}, step, std::move(done));
      return;
    }
    Submit(service_->store_->clock().Now(), proto::LinkStepRequest{step, WriteId{}},
           [done = std::move(done)](const replica::WriteAnswer& a) {
             if (!a.status.ok()) return done(a.status);
             LinkStepResult r = a.step;
             r.duplicate = a.duplicate;
             done(r);
           });
  }

  // link_step, node to node: a step on a record this node serves.
  void LinkStep(const FrameHeader& h, std::string_view body, Responder to) {
    proto::LinkStepRequest req;
    if (!Read(h, body, &req, to)) return;
    if (board_ == nullptr) {
      return ReplyError(
          h, Status::InvalidArgument("link_step is node to node, between a cluster's nodes"), to);
    }
    if (RefusedAsPassive(h, to)) return;
    if (!Serves(h, req.step.user, to)) return;
    if (replicator_ == nullptr) {
      session_->ApplyLinkStep(profile::WriteContext{}, req.step,
                              AnswerAsIs<LinkStepResult>(h, std::move(to)));
      return;
    }
    Submit(service_->store_->clock().Now(), std::move(req),
           [h, to = std::move(to)](const replica::WriteAnswer& a) mutable {
             ReplyApplied(h, a, to, [](const replica::WriteAnswer& x) {
               LinkStepResult r = x.step;
               r.duplicate = x.duplicate;
               return r;
             });
           });
  }

  // read_records, node to node: records as stored, of users this node
  // serves (WrongNode alone for the others).
  void ReadRecords(const FrameHeader& h, std::string_view body, Responder to) {
    proto::ReadRecordsRequest req;
    if (!Read(h, body, &req, to)) return;
    if (board_ == nullptr) {
      return ReplyError(
          h, Status::InvalidArgument("read_records is node to node, between a cluster's nodes"),
          to);
    }
    std::vector<Status> rejected;
    if (!SplitByPlacement(
            h, req.users.size(), [&](size_t i) -> std::string_view { return req.users[i]; },
            &rejected, to)) {
      return;
    }
    bool stale = LeaseLate();
    for (size_t i = 0; i < req.users.size() && !stale; ++i) {
      stale = (rejected.empty() || rejected[i].ok()) && Stale(req.users[i]);
    }
    struct Join {
      proto::ReadRecordsResponse results;
      size_t remaining = 0;
      FrameHeader h;
      Responder to;
    };
    auto join = std::make_shared<Join>(Join{{}, 0, h, MarkStale(std::move(to), stale)});
    for (size_t i = 0; i < req.users.size(); ++i) {
      if (!rejected.empty() && !rejected[i].ok()) {
        join->results.push_back(rejected[i]);
      } else {
        join->results.push_back(Status::Internal("pending"));
        ++join->remaining;
      }
    }
    if (join->remaining == 0) return ReplyOk(h, join->results, join->to);
    storage::Worker::Batch batch(session_->worker());
    for (size_t i = 0; i < req.users.size(); ++i) {
      if (!rejected.empty() && !rejected[i].ok()) continue;
      session_->worker().Get(
          req.users[i], [join, i, profiles = service_->profiles_](Result<storage::Record> r) {
            if (r.ok()) {
              // Fields as another node reads them: names inline, not this
              // node's numbers.
              std::string portable;
              profiles->PortableBody(r->key(), r->body(), &portable);
              join->results[i] = StoredRecord{std::move(portable), std::string(r->reference())};
            } else if (r.status().IsNotFound()) {
              join->results[i] = Status::NotFound("the user has no record");
            } else {
              join->results[i] = r.status();
            }
            if (--join->remaining == 0) ReplyOk(join->h, join->results, join->to);
          });
    }
  }

  // NotFound for a user in no group says so.
  template <typename T, typename Convert>
  static auto AnswerGroup(const FrameHeader& h, Responder to, Convert convert) {
    return [h, to = std::move(to), convert](Result<T> r) mutable {
      if (!r.ok()) {
        ReplyError(
            h, r.status().IsNotFound() ? Status::NotFound("the user is in no group") : r.status(),
            to);
        return;
      }
      ReplyOk(h, convert(std::move(*r)), to);
    };
  }

  void Link(const FrameHeader& h, std::string_view body, Responder to) {
    proto::LinkRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to) || RefusedInCluster(h, "links", to)) return;
    if (!Serves(h, req.user, to)) return;
    session_->Link(profile::WriteContext{}, req.user, req.master, req.ttl,
                   Answer<LinkResult>(h, std::move(to), [](LinkResult r) { return r; }));
  }

  void Unlink(const FrameHeader& h, std::string_view body, Responder to) {
    proto::UnlinkRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedAsPassive(h, to) || RefusedInCluster(h, "links", to)) return;
    if (!Serves(h, req.user, to)) return;
    session_->Unlink(
        profile::WriteContext{}, req.user,
        Answer<bool>(h, std::move(to), [](bool was) { return proto::UnlinkResponse{was}; }));
  }

  void MasterOf(const FrameHeader& h, std::string_view body, Responder to) {
    proto::MasterOfRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedInCluster(h, "links", to)) return;
    if (!Serves(h, req.user, to)) return;
    session_->MasterOf(req.user, AnswerGroup<std::string>(h, std::move(to), [](std::string m) {
                         return proto::MasterOfResponse{std::move(m)};
                       }));
  }

  void Links(const FrameHeader& h, std::string_view body, Responder to) {
    proto::LinksRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedInCluster(h, "links", to)) return;
    if (!Serves(h, req.user, to)) return;
    session_->Links(req.user, req.cursor, req.limit,
                    AnswerGroup<LinksPage>(h, std::move(to), [](LinksPage p) { return p; }));
  }

  void Connected(const FrameHeader& h, std::string_view body, Responder to) {
    proto::ConnectedRequest req;
    if (!Read(h, body, &req, to)) return;
    if (RefusedInCluster(h, "links", to)) return;
    if (!Serves(h, req.a, to)) return;
    session_->Connected(req.a, req.b, Answer<bool>(h, std::move(to), [](bool c) {
                          return proto::ConnectedResponse{c};
                        }));
  }

  ProfileService* service_;
  const cluster::ViewBoard* board_ = service_->options_.cluster;
  replica::Replicator* replicator_ = service_->options_.replicator;
  uint64_t view_generation_ = 0;  // of view_; the board's start at 1
  std::shared_ptr<const cluster::ClusterView> view_;
  std::unique_ptr<profile::ProfileSession> session_;
  std::shared_ptr<LoopPoster> poster_;         // answers of writes applied by the replicator
  std::unique_ptr<ClusterPeers> group_peers_;  // a cluster node's, with PeerLinks
  proto::DecodeLimits limits_;
  std::optional<storage::Worker::Batch> burst_;  // while the loop's turn lasts
};

ProfileService::ProfileService(storage::Store* store, profile::ProfileStore* profiles,
                               const ProfileServiceOptions& options)
    : store_(store), profiles_(profiles), options_(options) {}

Result<std::unique_ptr<Handler>> ProfileService::NewHandler(unsigned /*thread_index*/,
                                                            std::shared_ptr<LoopPoster> poster) {
  Result<std::unique_ptr<profile::ProfileSession>> session = profiles_->NewSession();
  if (!session.ok()) return session.status();
  return std::unique_ptr<Handler>(new ProfileHandler(this, std::move(*session), std::move(poster)));
}

MetricsSnapshot ProfileService::Snapshot() const {
  MetricsSnapshot m;
  m.version = options_.server_name;
  m.uptime_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  ReadProcessFigures(&m);
  if (server_counters_) {
    m.server = std::make_unique<ServerCounters>();
    server_counters_(m.server.get());
  }
  m.storage = store_->stats();
  m.recovery = store_->recovery();
  m.sweeper = profiles_->sweeper_stats();
  m.field_names = profile::FieldNamesOf(*profiles_).size();
  if (cluster_stats_) m.cluster = cluster_stats_();
  if (bootstrap_stats_) m.bootstrap = bootstrap_stats_();
  if (options_.replicator != nullptr) m.replica = options_.replicator->stats();
  m.config = options_.config;
  return m;
}

Stats ProfileService::CollectStats() const { return ToStats(Snapshot()); }

std::string ProfileService::PrometheusText() const { return ToPrometheus(Snapshot()); }

}  // namespace segstore::server
