#include "server/listen.h"

namespace segstore::server {

namespace asio = boost::asio;
using asio::ip::tcp;

Status Listen(tcp::acceptor* acceptor, const std::string& host, uint16_t port,
              std::string_view what) {
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    asio::io_context resolve_io;
    tcp::resolver resolver(resolve_io);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("cannot resolve " + std::string(what) + " host \"" + host +
                                     "\": " + ec.message());
    }
    address = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor->close(ignored);
    return Status::IOError("cannot " + std::string(what) + " on " + host + ":" +
                           std::to_string(port) + ": " + ec.message());
  }
  return Status::OK();
}

}  // namespace segstore::server
