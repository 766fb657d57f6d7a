// A minimal HTTP/1.1 client over RawConn for tests of the admin endpoint:
// one request written, one answer read (headers and Content-Length body).
#pragma once

#include <string>
#include <string_view>

#include "server/raw_conn.h"

namespace segstore::server::testing {

struct HttpAnswer {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// Reads one HTTP response from `c` (headers, then Content-Length bytes of
// body; none for HEAD). status 0: the connection closed first.
inline HttpAnswer ReadAnswer(RawConn& c, bool head = false) {
  HttpAnswer a;
  std::string data;
  size_t end = std::string::npos;
  while ((end = data.find("\r\n\r\n")) == std::string::npos) {
    std::string more;
    if (!c.ReadSome(&more, kPatience)) return a;
    data += more;
  }
  a.head = data.substr(0, end);
  std::string rest = data.substr(end + 4);
  a.status = std::stoi(a.head.substr(9, 3));
  size_t length = 0;
  const size_t cl = a.head.find("Content-Length: ");
  if (cl != std::string::npos) length = std::stoul(a.head.substr(cl + 16));
  if (head) length = 0;
  while (rest.size() < length) {
    std::string more;
    if (!c.ReadSome(&more, kPatience)) break;
    rest += more;
  }
  a.body = rest.substr(0, length);
  return a;
}

inline std::string Request(std::string_view method, std::string_view path, bool close = false) {
  std::string r = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: t\r\n";
  if (close) r += "Connection: close\r\n";
  return r + "\r\n";
}

// One request on a fresh connection (closed after the answer).
inline HttpAnswer Ask(uint16_t port, std::string_view method, std::string_view path) {
  RawConn c;
  if (!c.Connect(port)) return {};
  if (!c.Write(Request(method, path, true))) return {};
  return ReadAnswer(c, method == "HEAD");
}

}  // namespace segstore::server::testing
