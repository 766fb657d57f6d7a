// What the loaders' tests (link_load_test.cc, field_load_test.cc) share: a
// front end with a say in one kind of request, and writing input files.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "proto/wire.h"
#include "server/service.h"

namespace segstore::server::testing {

inline void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

inline void WriteGzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

// A Service in front of another, with a say in its `kOp` requests: `decide`
// (when set) may answer one with an error instead, as a busy server or a
// cluster node refusing would. Everything else goes through.
template <typename Request, proto::Op kOp>
class RequestFaults : public Service {
 public:
  using Decide = std::function<Status(const Request&)>;
  explicit RequestFaults(Service* inner) : inner_(inner) {}

  void set_decide(Decide decide) {
    std::lock_guard<std::mutex> lock(mu_);
    decide_ = std::move(decide);
  }
  // The kOp requests seen (decoded), refused or not.
  uint64_t requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

  Result<std::unique_ptr<Handler>> NewHandler(unsigned thread_index,
                                              std::shared_ptr<LoopPoster> poster) override {
    auto inner = inner_->NewHandler(thread_index, std::move(poster));
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<Handler>(new Faulty(std::move(*inner), this));
  }

 private:
  Status Judge(const Request& r) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    return decide_ ? decide_(r) : Status::OK();
  }

  class Faulty : public Handler {
   public:
    Faulty(std::unique_ptr<Handler> inner, RequestFaults* faults)
        : inner_(std::move(inner)), faults_(faults) {}
    void Handle(const proto::FrameHeader& header, std::string_view body,
                Responder responder) override {
      Request req;
      if (header.op == static_cast<uint8_t>(kOp) &&
          proto::Decode(body, proto::DecodeLimits{}, &req).ok()) {
        if (Status s = faults_->Judge(req); !s.ok()) {
          std::string frame;
          proto::AppendErrorFrame(&frame, header.op, header.request_id, s);
          responder.Send(std::move(frame));
          return;
        }
      }
      inner_->Handle(header, body, std::move(responder));
    }
    int event_fd() const override { return inner_->event_fd(); }
    void OnEvent() override { inner_->OnEvent(); }
    void BeginBurst() override { inner_->BeginBurst(); }
    void EndBurst() override { inner_->EndBurst(); }

   private:
    std::unique_ptr<Handler> inner_;
    RequestFaults* faults_;
  };

  Service* inner_;
  std::mutex mu_;
  Decide decide_;
  uint64_t requests_ = 0;
};

}  // namespace segstore::server::testing
