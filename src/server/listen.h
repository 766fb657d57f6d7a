// Opening a listening TCP socket, shared by the client port (server.cc) and
// the admin endpoint (admin.cc).
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "segstore/status.h"

namespace segstore::server {

// Opens *acceptor (made on its io_context, not yet open) listening on
// host:port; `host` is an address or a name to resolve, port 0 picks a free
// one. `what` names the listener in messages ("listen", "admin listen").
// InvalidArgument when the host does not resolve, IOError when the socket
// cannot be bound or listened on (the acceptor is then closed).
Status Listen(boost::asio::ip::tcp::acceptor* acceptor, const std::string& host, uint16_t port,
              std::string_view what);

}  // namespace segstore::server
