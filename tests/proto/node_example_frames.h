// The table of example frames of the node-to-node operations (copy_partition)
// in proto/examples/*.hex, beside tests/support/example_frames.h's table of
// the client's operations: for each file, the frame's header fields and the
// body as the C++ struct it encodes. Kept apart because those are what a
// single server answers (tests/integration sends every request of that table
// to one); these are answered by cluster nodes only. Shared, like that table,
// by the generator (tests/proto/gen_examples.cc) and tests/proto/wire_test.cc.
// Change an example here, then regenerate:
//
//   make proto_examples_gen && ./tests/proto/proto_examples_gen ../proto/examples
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "proto/protocol.h"
#include "proto/wire.h"
#include "segstore/messages.h"
#include "segstore/status.h"
#include "support/example_frames.h"

namespace segstore::proto::examples {

using NodeBody =
    std::variant<ErrorBody, WrongNodeBody, CopyPartitionRequest, CopyPartitionResponse,
                 LinkStepRequest, LinkStepResponse, ReadRecordsRequest, ReadRecordsResponse>;

// The header's flags are 0: these answers are never stale. EncodeBody and
// EncodeFrame are example_frames.h's.
using NodeExample = ExampleOf<NodeBody>;

inline std::vector<NodeExample> NodeToNode() {
  std::vector<NodeExample> v;
  const auto ok = Status::Code::kOk;

  // ---- copy_partition ----
  v.push_back(
      {"copy_partition.request.hex",
       "copy_partition request: the first page of partition 3045, at most 1 MiB",
       {"Node to node: a node the map lists as \"incoming\" for partition 3045 copies it",
        "from a replica. \"partition\" (0 to 4095) and \"cursor\" (0 for the first page;",
        "then the previous answer's) are required; \"min_next\" (default 0) and",
        "\"max_bytes\" (default: the server's page size; at most 64 MiB) are not."},
       Op::kCopyPartition,
       25,
       ok,
       CopyPartitionRequest{.partition = 3045, .cursor = 0, .min_next = 0, .max_bytes = 1u << 20}});
  CopyPartitionResponse page;
  page.next = 1234;
  page.cursor = 3000000000;
  // Bodies as the profile codec writes them on a cluster node (version 2,
  // with the record's log position: 1233 and 1187).
  page.records.push_back(CopiedRecord{"foo",
                                      std::string("\x02\xd1\x09\x02\x65\x06\x0f\xba\xab\x01\x01"
                                                  "\x03\x9d\x75",
                                                  14),
                                      kFeb2030, 0});
  page.records.push_back(CopiedRecord{
      "{foo}.device", std::string("\x02\xa3\x09\x01\xec\x2a\x00\x03\x9b\xab\x01\x00", 12), kJan2030,
      kJan2030});
  v.push_back({"copy_partition.response.hex",
               "copy_partition response: a page of two records, more to come",
               {"\"next\": the first offset of log partition 37 (3045 mod 64 log partitions)",
                "the node had not applied when it read the page: every record of the copy",
                "reflects every entry before the first page's \"next\"; keep it and follow the",
                "log from there once the copy is done. \"cursor\": where the next page starts",
                "(2^32 when the partition is finished). Each record is [key (bin: the user ID),",
                "body (bin: the stored record as is, opaque), sweep_at, void_at (u32 Unix",
                "seconds, 0: none)]. \"foo\" and \"{foo}.device\" are both of partition 3045."},
               Op::kCopyPartition,
               25,
               ok,
               page});
  v.push_back({"copy_partition_done.request.hex",
               "copy_partition request: a later page, from the previous answer's cursor",
               {"\"min_next\" 1234, the first page's \"next\": a node that has not applied log",
                "partition 37 that far answers Busy (see copy_partition_busy.response)."},
               Op::kCopyPartition,
               26,
               ok,
               CopyPartitionRequest{
                   .partition = 3045, .cursor = 3000000000, .min_next = 1234, .max_bytes = 0}});
  v.push_back({"copy_partition_done.response.hex",
               "copy_partition response: the partition is finished",
               {"\"cursor\" 2^32 (4294967296, a uint64): no more pages. Only the last page may",
                "be empty; every other holds at least one record."},
               Op::kCopyPartition,
               26,
               ok,
               CopyPartitionResponse{.next = 1240, .cursor = kCopyFinished, .records = {}}});
  v.push_back({"copy_partition_busy.response.hex",
               "error response to copy_partition: the node is behind the copier",
               {"Status 8 (Busy): the node has applied log partition 37 only up to 1100, below",
                "the request's \"min_next\" (1234); or it is not caught up with the log (\"this",
                "node is not caught up with the log; retry shortly\"). Retry shortly, or ask",
                "another replica. A node that does not serve the partition answers status 14",
                "(WrongNode) with the map's \"revision\", as wrong_node.response shows for get.",
                "The request that got it: copy_partition_done.request."},
               Op::kCopyPartition,
               26,
               Status::Code::kBusy,
               ErrorBody{"copy_partition: log partition 37 is applied up to 1100, below "
                         "min_next 1234; retry shortly"}});
  v.push_back({"copy_partition_no_log.response.hex",
               "error response to copy_partition from a node without a cluster log",
               {"Status 2 (InvalidArgument): a single server, or a cluster node that does not",
                "write through a log, cannot give a copy that the log can be followed from.",
                "The request that got it: copy_partition.request."},
               Op::kCopyPartition,
               25,
               Status::Code::kInvalidArgument,
               ErrorBody{"copy_partition needs a cluster node that writes through a log"}});

  // ---- link_step, read_records (profile bridging in a cluster) ----
  LinkStepRequest list;
  list.step.kind = LinkStep::Kind::kList;
  list.step.user = "home-pc";
  list.step.member = "phone";
  list.step.expires = kFeb2030;
  list.step.max_links = 64;
  list.write_id = WriteId{0x0102030405060708ull, 0x0000000000000001ull};
  v.push_back({"link_step.request.hex",
               "link_step request: a link's first step, on the target's record",
               {"Node to node: the node running link(phone, home-pc) asks the node holding",
                "home-pc's partition to make home-pc list phone (its link expiring at",
                "\"expires\", Unix seconds), with the group's limit \"max_links\". The",
                "answering node writes it through the cluster's log like any write, with",
                "the write ID given. \"kind\" is one of list, name, name_moved, drop,",
                "clear, delete_member, delete (PROTOCOL.md, link_step)."},
               Op::kLinkStep,
               27,
               ok,
               list});
  v.push_back({"link_step.response.hex",
               "link_step response: applied; the target lists one member now",
               {"\"changed\" true instead would say the record was not as the link read it",
                "(it names a master of its own now): the link starts over."},
               Op::kLinkStep,
               27,
               ok,
               LinkStepResponse{.applied = true, .changed = false, .members = 1}});
  v.push_back({"read_records.request.hex",
               "read_records request: two records as stored",
               {"Node to node: a node gathering the merged view of a group reads the",
                "members it does not hold from a node that holds them."},
               Op::kReadRecords,
               28,
               ok,
               ReadRecordsRequest{{"phone", "tablet"}}});
  ReadRecordsResponse records;
  records.push_back(
      StoredRecord{std::string("\x02\xa3\x09\x01\xec\x2a\x00\x03\x9b\xab\x01\x00", 12), "home-pc"});
  records.push_back(Status::NotFound("the user has no record"));
  v.push_back({"read_records.response.hex",
               "read_records response: phone's record, and none for tablet",
               {"One result per user asked, in order, as batch_get's: status 0 with \"body\"",
                "(bin: the stored record as is, the profile codec's bytes) and \"reference\"",
                "(bin: the master its record names; empty: none); else status and message:",
                "1 (NotFound) for a user without a record, 14 (WrongNode) for one the node",
                "does not serve."},
               Op::kReadRecords,
               28,
               ok,
               records});
  return v;
}

}  // namespace segstore::proto::examples
