// segctl stats for people: the server's statistics (the stats operation's
// flat map, proto/PROTOCOL.md) as tables. One table per operation row
// (requests, errors, service-time percentiles), the errors by status, then
// each section ("server", "storage", ...) as aligned name/value pairs.
// Names the table does not know are still printed, under their section.
#pragma once

#include <string>

#include "segstore/messages.h"

namespace segstore::tools {

std::string FormatStatsTable(const Stats& stats);

}  // namespace segstore::tools
