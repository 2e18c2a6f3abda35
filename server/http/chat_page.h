// The chat page GET / serves: server/http/chat_page.html, built into the
// binary so that the server needs no files beside it.
#pragma once

#include "absl/strings/string_view.h"

namespace attn::serving::http {

absl::string_view ChatPage();

}  // namespace attn::serving::http
