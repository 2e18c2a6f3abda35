// RouteOf, the metrics endpoint's request-line parser, on arbitrary heads:
// it must answer every input, and only a request line naming GET and one of
// its two paths is ever served.
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "server/metrics_http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string head(reinterpret_cast<const char*>(data), size);
  const attn::serving::MetricsRoute route = attn::serving::RouteOf(head);
  const bool served = route == attn::serving::MetricsRoute::kMetrics ||
                      route == attn::serving::MetricsRoute::kHealth;
  if (served &&
      !(absl::StartsWith(head, "GET /metrics") || absl::StartsWith(head, "GET /healthz"))) {
    __builtin_trap();
  }
  return 0;
}
