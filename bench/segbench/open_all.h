// OpenAll: opens `n` connections of any kind at once on one io_context and
// waits for them all, running that io_context on the calling thread.
// `open(io, done)` starts one connection and calls done(Result<unique_ptr<T>>)
// once, on io's thread. Fails with the first connection's error (the others
// are closed).
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio/io_context.hpp>

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

}  // namespace segstore::bench
