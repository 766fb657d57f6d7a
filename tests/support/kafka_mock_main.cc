// segstore-test-kafka: librdkafka's mock Kafka cluster in a process of its
// own, for tests (tests/support/kafka_mock.h starts and drives it; what the
// mock does and does not model is written there).
//
//   segstore-test-kafka [--brokers N] [--topic NAME] [--partitions N]
//
// Starts N brokers (IDs 1..N; default 3) on loopback ports, creates the
// topic (default "segstore", 4 partitions, replication factor min(3, N)),
// prints one line `bootstrap <host:port,...>` on stdout, then answers each
// line read on stdin with one line, `ok` or `error <why>`:
//
//   down <broker_id>                          the broker drops its connections and refuses new ones
//   up <broker_id>                            it accepts connections again
//   leader <partition> <broker_id>            moves the partition's leader (of the first topic)
//   errors <api> <error> <count>              the next <count> requests of <api> (a name such as
//                                             Produce, or a number) fail with <error> (a name
//                                             such as NOT_ENOUGH_REPLICAS, or a number)
//   clear                                     drops every error pushed and not yet returned
//   rtt <broker_id> <ms>                      delays the broker's answers (-1: every broker)
//   topic <name> <partitions>                 creates another topic
//   topic-error <name> <error>                Metadata answers <error> for the topic (e.g.
//                                             UNKNOWN_TOPIC_OR_PART: the mock creates any topic
//                                             a client asks for, so this is how one is missing;
//                                             NO_ERROR ends it)
//   quit                                      ends the process (so does the end of stdin)
//
// Single-threaded apart from the mock cluster's own thread, which the
// rd_kafka_mock_* calls hand their work to.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Api {
  const char* name;
  int16_t key;
};
// Kafka protocol API keys the mock serves, by the names of the protocol spec.
constexpr Api kApis[] = {
    {"Produce", 0},          {"Fetch", 1},
    {"ListOffsets", 2},      {"Metadata", 3},
    {"OffsetCommit", 8},     {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},
    {"Heartbeat", 12},       {"LeaveGroup", 13},
    {"SyncGroup", 14},       {"ApiVersions", 18},
    {"InitProducerId", 22},  {"OffsetForLeaderEpoch", 23},
};
constexpr int16_t kMaxApiKey = 70;

bool ParseInt(const std::string& s, long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtol(s.c_str(), &end, 10);
  return end != nullptr && *end == '\0';
}

bool ParseApi(const std::string& s, int16_t* key) {
  long n = 0;
  if (ParseInt(s, &n)) {
    if (n < 0 || n > kMaxApiKey) return false;
    *key = static_cast<int16_t>(n);
    return true;
  }
  for (const Api& api : kApis) {
    if (strcasecmp(api.name, s.c_str()) == 0) {
      *key = api.key;
      return true;
    }
  }
  return false;
}

// A broker error code by number or by librdkafka's name for it
// (NOT_ENOUGH_REPLICAS, _TRANSPORT, ...).
bool ParseError(const std::string& s, rd_kafka_resp_err_t* err) {
  long n = 0;
  if (ParseInt(s, &n)) {
    *err = static_cast<rd_kafka_resp_err_t>(n);
    return true;
  }
  const rd_kafka_err_desc* descs = nullptr;
  size_t count = 0;
  rd_kafka_get_err_descs(&descs, &count);
  for (size_t i = 0; i < count; ++i) {
    if (descs[i].name != nullptr && strcasecmp(descs[i].name, s.c_str()) == 0) {
      *err = descs[i].code;
      return true;
    }
  }
  return false;
}

struct Mock {
  rd_kafka_mock_cluster_t* cluster = nullptr;
  std::string topic;
  int brokers = 0;
};

int ReplicationFactor(int brokers) { return brokers < 3 ? brokers : 3; }

// Runs one command line; the answer to print ("ok" or "error ...").
std::string Run(Mock& mock, const std::string& line, bool* quit) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) return "error empty command";
  const std::string& cmd = words[0];
  auto answer = [](rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_NO_ERROR ? std::string("ok")
                                             : std::string("error ") + rd_kafka_err2str(err);
  };
  long a = 0;
  long b = 0;
  long c = 0;
  if (cmd == "quit" && words.size() == 1) {
    *quit = true;
    return "ok";
  }
  if ((cmd == "down" || cmd == "up") && words.size() == 2 && ParseInt(words[1], &a)) {
    if (a < 1 || a > mock.brokers) return "error no broker " + words[1];
    const int32_t id = static_cast<int32_t>(a);
    return answer(cmd == "down" ? rd_kafka_mock_broker_set_down(mock.cluster, id)
                                : rd_kafka_mock_broker_set_up(mock.cluster, id));
  }
  if (cmd == "leader" && words.size() == 3 && ParseInt(words[1], &a) && ParseInt(words[2], &b)) {
    if (b != -1 && (b < 1 || b > mock.brokers)) return "error no broker " + words[2];
    return answer(rd_kafka_mock_partition_set_leader(
        mock.cluster, mock.topic.c_str(), static_cast<int32_t>(a), static_cast<int32_t>(b)));
  }
  if (cmd == "errors" && words.size() == 4) {
    int16_t api = 0;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (!ParseApi(words[1], &api)) return "error unknown api " + words[1];
    if (!ParseError(words[2], &err)) return "error unknown error code " + words[2];
    if (!ParseInt(words[3], &c) || c < 1 || c > 1000000) return "error bad count " + words[3];
    std::vector<rd_kafka_resp_err_t> errs(static_cast<size_t>(c), err);
    rd_kafka_mock_push_request_errors_array(mock.cluster, api, errs.size(), errs.data());
    return "ok";
  }
  if (cmd == "clear" && words.size() == 1) {
    for (int16_t api = 0; api <= kMaxApiKey; ++api) {
      rd_kafka_mock_clear_request_errors(mock.cluster, api);
    }
    return "ok";
  }
  if (cmd == "rtt" && words.size() == 3 && ParseInt(words[1], &a) && ParseInt(words[2], &b)) {
    return answer(
        rd_kafka_mock_broker_set_rtt(mock.cluster, static_cast<int32_t>(a), static_cast<int>(b)));
  }
  if (cmd == "topic" && words.size() == 3 && ParseInt(words[2], &b) && b > 0) {
    return answer(rd_kafka_mock_topic_create(mock.cluster, words[1].c_str(), static_cast<int>(b),
                                             ReplicationFactor(mock.brokers)));
  }
  if (cmd == "topic-error" && words.size() == 3) {
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (!ParseError(words[2], &err)) return "error unknown error code " + words[2];
    rd_kafka_mock_topic_set_error(mock.cluster, words[1].c_str(), err);
    return "ok";
  }
  return "error unknown command: " + line;
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "segstore-test-kafka: %s\n"
               "usage: segstore-test-kafka [--brokers N] [--topic NAME] [--partitions N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  long brokers = 3;
  long partitions = 4;
  std::string topic = "segstore";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return Usage(("missing value after " + arg).c_str());
    const std::string value = argv[++i];
    if (arg == "--brokers") {
      if (!ParseInt(value, &brokers) || brokers < 1 || brokers > 16) return Usage("bad --brokers");
    } else if (arg == "--partitions") {
      if (!ParseInt(value, &partitions) || partitions < 1 || partitions > 4096) {
        return Usage("bad --partitions");
      }
    } else if (arg == "--topic") {
      topic = value;
    } else {
      return Usage(("unknown option " + arg).c_str());
    }
  }

  // The mock needs a client handle for its bookkeeping; it is never used
  // otherwise. Its logs (the mock's too) go to stderr, errors only.
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
    std::fprintf(stderr, "segstore-test-kafka: %s\n", errstr);
    return 1;
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (rk == nullptr) {
    std::fprintf(stderr, "segstore-test-kafka: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  Mock mock;
  mock.brokers = static_cast<int>(brokers);
  mock.topic = topic;
  mock.cluster = rd_kafka_mock_cluster_new(rk, mock.brokers);
  if (mock.cluster == nullptr) {
    std::fprintf(stderr, "segstore-test-kafka: rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  const rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(
      mock.cluster, topic.c_str(), static_cast<int>(partitions), ReplicationFactor(mock.brokers));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    std::fprintf(stderr, "segstore-test-kafka: creating topic %s: %s\n", topic.c_str(),
                 rd_kafka_err2str(err));
    rd_kafka_mock_cluster_destroy(mock.cluster);
    rd_kafka_destroy(rk);
    return 1;
  }

  std::cout << "bootstrap " << rd_kafka_mock_cluster_bootstraps(mock.cluster) << std::endl;
  bool quit = false;
  for (std::string line; !quit && std::getline(std::cin, line);) {
    std::cout << Run(mock, line, &quit) << std::endl;
  }

  // Ends at once: tearing the cluster down takes librdkafka about a second
  // (its threads wake once a second), and the kernel closes the sockets.
  std::cout.flush();
  std::_Exit(0);
}
