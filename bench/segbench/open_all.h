// Connections of any kind (a segbench Connection, a client AsyncClient) on
// one io_context, run by the calling thread:
// - OpenAll opens `n` at once and waits for them all. `open(io, done)` starts
//   one connection and calls done(Result<unique_ptr<T>>) once, on io's
//   thread. Fails with the first connection's error (the others are closed).
// - DrainAll runs io until none has a request in flight, or `limit` passes.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "segstore/result.h"

namespace segstore::bench {

template <typename T, typename OpenFn>
Result<std::vector<std::unique_ptr<T>>> OpenAll(boost::asio::io_context& io, unsigned n,
                                                OpenFn open) {
  std::vector<std::unique_ptr<T>> conns(n);
  unsigned answered = 0;
  Status first = Status::OK();
  for (unsigned i = 0; i < n; ++i) {
    open(io, [&, i](Result<std::unique_ptr<T>> r) {
      ++answered;
      if (!r.ok()) {
        if (first.ok()) first = r.status();
        return;
      }
      conns[i] = std::move(r).value();
    });
  }
  while (answered < n) io.run_one();
  if (!first.ok()) return first;
  return conns;
}

template <typename T>
void DrainAll(boost::asio::io_context& io, const std::vector<std::unique_ptr<T>>& conns,
              std::chrono::steady_clock::duration limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    size_t in_flight = 0;
    for (const auto& c : conns) in_flight += c ? c->in_flight() : 0;
    if (in_flight == 0) return;
    io.run_for(std::chrono::milliseconds(5));
  }
}

}  // namespace segstore::bench
