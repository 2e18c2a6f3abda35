#include "server/http/responses_service.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/core/model_registry.h"
#include "server/http/call_adapters.h"
#include "server/http/openai_response.h"
#include "server/http/responses_output.h"
#include "server/state/response_store.h"
#include "util/field_error.h"

namespace attn::serving::http {
namespace {

constexpr char kPrefix[] = "/v1/responses/";

// What a turn keeps until its reply is done, to store the response.
struct TurnRecord {
  ResponsesContext context;
  Conversation conversation;
  const Tokenizer* tokenizer = nullptr;
};

// The stored conversation of a response's record.
absl::StatusOr<Conversation> ConversationOf(const std::string& record) {
  const Json json = Json::parse(record, nullptr, false);
  if (json.is_discarded() || !json.contains("conversation")) {
    return InvalidField("previous_response_id", "its stored record does not parse");
  }
  return Conversation::FromJson(json["conversation"]);
}

// Holds `reply`'s connection open while the store answers (from Redis, on
// its thread); the flag turns true if the client hangs up meanwhile.
std::shared_ptr<std::atomic<bool>> KeepOpen(const std::shared_ptr<Reply>& reply) {
  auto gone = std::make_shared<std::atomic<bool>>(false);
  reply->OnHangUp([gone] { *gone = true; });
  return gone;
}

}  // namespace

ResponsesService::ResponsesService(const CallCore& core, ResponseStore& store,
                                   absl::Duration timeout)
    : core_(core), store_(store), timeout_(timeout) {}

void ResponsesService::AddRoutes(HttpServer& server) {
  using Method = void (ResponsesService::*)(const HttpRequest&, std::shared_ptr<Reply>);
  auto handler = [this](Method method) {
    return [this, method](const HttpRequest& r, std::shared_ptr<Reply> reply) {
      (this->*method)(r, std::move(reply));
    };
  };
  server.Route("POST", "/v1/responses", handler(&ResponsesService::Create));
  server.Route("GET", "/v1/responses/", handler(&ResponsesService::Retrieve));
  server.Route("DELETE", "/v1/responses/", handler(&ResponsesService::Remove));
}

void ResponsesService::Refuse(const std::shared_ptr<Reply>& reply, const char* method,
                              const absl::Status& status) {
  reply->Send(ErrorReply(status));
  core_.Count("", method, status.code(), Protocol::kHttp);
}

void ResponsesService::Create(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  const std::string authorization = request.Header("authorization");
  if (absl::Status known = core_.access().Authenticate(authorization); !known.ok()) {
    return Refuse(reply, "Responses", known);
  }
  absl::StatusOr<ResponsesRequest> parsed = ParseResponsesRequest(request.body);
  if (!parsed.ok()) return Refuse(reply, "Responses", parsed.status());
  const absl::Time deadline = DeadlineOf(request, timeout_);
  if (parsed->previous_response_id.empty()) {
    return Run(*parsed, std::nullopt, authorization, deadline, reply);
  }
  auto r = std::make_shared<ResponsesRequest>(*std::move(parsed));
  store_.Get(r->previous_response_id, [this, r, authorization, deadline, reply,
                                       gone = KeepOpen(reply)](absl::StatusOr<std::string> record) {
    if (*gone) return core_.Count("", "Responses", absl::StatusCode::kCancelled, Protocol::kHttp);
    if (!record.ok()) {
      const absl::Status status =
          record.status().code() == absl::StatusCode::kNotFound
              ? InvalidField("previous_response_id",
                             absl::StrCat("no stored response ", r->previous_response_id,
                                          " (never stored, stored with store: false, deleted, "
                                          "or older than --response_ttl)"))
              : record.status();
      return Refuse(reply, "Responses", status);
    }
    absl::StatusOr<Conversation> previous = ConversationOf(*record);
    if (!previous.ok()) return Refuse(reply, "Responses", previous.status());
    if (r->model.empty()) r->model = previous->model;
    Run(*r, *std::move(previous), authorization, deadline, reply);
  });
}

void ResponsesService::Run(const ResponsesRequest& r, std::optional<Conversation> previous,
                           const std::string& authorization, absl::Time deadline,
                           const std::shared_ptr<Reply>& reply) {
  auto turn = std::make_shared<TurnRecord>();
  auto convert = [&](const HostedModel& model) -> absl::StatusOr<std::vector<EngineRequest>> {
    const ModelDescription& d = model.description;
    turn->context = NewResponsesContext(r, d.name, ToolCallFormatOf(model));
    turn->tokenizer = model.tokenizer.get();
    absl::StatusOr<ResponsesTurn> t = ToResponsesTurn(
        r, previous ? &*previous : nullptr, TargetOf(model), d.name, d.fingerprint, deadline);
    if (!t.ok()) return t.status();
    turn->conversation = std::move(t->conversation);
    return std::vector<EngineRequest>{std::move(t->request)};
  };
  // Stores the finished response with the conversation it ends in.
  OnResponse on_response = [this, turn, store = r.store](
                               const Json& response, const StreamEvent& last, ChatMessage message) {
    if (!store) return;
    Conversation conversation = turn->conversation;
    EndTurn(*turn->tokenizer, std::move(message), last.state_token_ids, &conversation);
    const Json record = {{"response", response}, {"conversation", conversation.ToJson()}};
    store_.Put(turn->context.id, record.dump(-1, ' ', false, Json::error_handler_t::replace));
  };
  if (!r.stream) {
    auto collector = std::make_shared<CollectingCall>(core_, "Responses", reply);
    absl::Status started = collector->Start(
        authorization, r.model, convert, [turn, on_response](const std::vector<ChoiceLog>& logs) {
          const ChoiceLog& log = logs.front();
          const Json output = OutputItems(turn->context, log.text);
          Json response = ResponseObject(turn->context, output, &log.last);
          on_response(response, log.last, ReplyMessage(output));
          return response;
        });
    if (!started.ok()) reply->Send(ErrorReply(started));
    return;
  }
  StreamCall(
      std::make_unique<Call>(core_, "Responses", Protocol::kHttp), reply,
      [&](Call& call, std::function<void()> wake) {
        return call.Start(authorization, r.model, convert, std::move(wake),
                          Call::WakeOn::kEngineThread);
      },
      [&] { return std::make_unique<ResponsesEvents>(turn->context, on_response); });
}

std::string ResponsesService::IdOf(const HttpRequest& request, const std::shared_ptr<Reply>& reply,
                                   const char* method) {
  if (absl::Status known = core_.access().Authenticate(request.Header("authorization"));
      !known.ok()) {
    Refuse(reply, method, known);
    return "";
  }
  const std::string id = request.path.substr(sizeof(kPrefix) - 1);
  if (id.empty() || id.find('/') != std::string::npos) {
    Refuse(reply, method,
           FieldError(absl::StatusCode::kNotFound, "id",
                      "give a response's id after /v1/responses/ (input_items are not served)"));
    return "";
  }
  return id;
}

void ResponsesService::Retrieve(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  const std::string id = IdOf(request, reply, "GetResponse");
  if (id.empty()) return;
  store_.Get(id, [this, reply, gone = KeepOpen(reply)](absl::StatusOr<std::string> record) {
    if (!record.ok()) return Refuse(reply, "GetResponse", record.status());
    const Json json = Json::parse(*record, nullptr, false);
    if (json.is_discarded() || !json.contains("response")) {
      return Refuse(reply, "GetResponse", absl::InternalError("the stored record does not parse"));
    }
    reply->Send(JsonReply(200, json["response"]));
    core_.Count("", "GetResponse", absl::StatusCode::kOk, Protocol::kHttp);
  });
}

void ResponsesService::Remove(const HttpRequest& request, std::shared_ptr<Reply> reply) {
  const std::string id = IdOf(request, reply, "DeleteResponse");
  if (id.empty()) return;
  store_.Delete(id, [this, id, reply, gone = KeepOpen(reply)](absl::StatusOr<bool> deleted) {
    if (!deleted.ok()) return Refuse(reply, "DeleteResponse", deleted.status());
    if (!*deleted) {
      return Refuse(
          reply, "DeleteResponse",
          FieldError(absl::StatusCode::kNotFound, "id", absl::StrCat("no stored response ", id)));
    }
    reply->Send(JsonReply(200, {{"id", id}, {"object", "response"}, {"deleted", true}}));
    core_.Count("", "DeleteResponse", absl::StatusCode::kOk, Protocol::kHttp);
  });
}

}  // namespace attn::serving::http
