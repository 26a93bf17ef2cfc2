// Renders engine metrics in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <string>

#include "engine/metrics.h"

namespace kestrel::server {

std::string render_prometheus(const MetricsSnapshot& m, const std::string& model_name);

}  // namespace kestrel::server
