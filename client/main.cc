// attnctl: command-line client of attn-server.
//
//   attnctl models
//   attnctl generate --prompt="Once upon a time" --max_tokens=40 [--temperature=0]
//   attnctl stream   --prompt="Once upon a time" --max_tokens=40
//   attnctl score    --text="The cat sat on the mat."
//   attnctl score    --text_file=book.txt --score_tokens=8192 --segments=128,256,512,1024
//   attnctl tokenize --text="hello"      attnctl detokenize --ids=1,2,3
//   attnctl health   [--service=aft-decay]
//   attnctl bench    --concurrency=64 --prompt_tokens=128 --max_tokens=64 --duration_s=20
//                    [--http=127.0.0.1:8000: the same load over the OpenAI HTTP API]
//   attnctl chat     [--servers=host:port,host:port] [--hold_state=false] < turns.txt
//   attnctl generate --prompt="..." --state_out=s.bin, then --state_in=s.bin --prompt="more"
//
// --json prints responses as JSON (one object per line for stream).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "attn/v1/text_generation.grpc.pb.h"
#include "client/bench.h"
#include "client/channel.h"
#include "client/chat.h"
#include "client/health.h"
#include "client/segments.h"
#include "util/files.h"
#include "util/flags.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Server address host:port.");
ABSL_FLAG(std::string, model, "", "Model name; empty: the server's default.");
ABSL_FLAG(std::string, prompt, "", "Prompt text (generate, stream).");
ABSL_FLAG(std::string, text, "", "Text (score, tokenize).");
ABSL_FLAG(std::string, text_file, "",
          "File whose text to use instead of --text (score, tokenize).");
ABSL_FLAG(int64_t, score_tokens, 0, "score: only the first N tokens of the text; 0: all.");
ABSL_FLAG(std::string, segments, "",
          "score: print the mean loss per position segment instead of per token, with segments "
          "ending at these positions (e.g. 128,256,512,1024,2048,4096).");
ABSL_FLAG(std::string, ids, "", "Comma-separated token ids (prompt, score, detokenize).");
ABSL_FLAG(int, max_tokens, 64, "Tokens to generate.");
ABSL_FLAG(double, temperature, 1.0, "0: greedy.");
ABSL_FLAG(int, top_k, 0, "0: no limit.");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling in (0, 1].");
ABSL_FLAG(double, repetition_penalty, 1.0, "1: off.");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed; -1: the server picks one.");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings, comma-separated.");
ABSL_FLAG(bool, logprobs, false, "Ask for each token's log-probability.");
ABSL_FLAG(bool, ignore_eos, false, "Generate max_tokens even past the end-of-text token.");
ABSL_FLAG(bool, json, false, "Print responses as JSON.");
ABSL_FLAG(std::string, initial_state, "",
          "generate, stream, chat: start from the model's initial state of this name "
          "(attnctl models lists them).");
ABSL_FLAG(double, timeout_s, 0, "Deadline of the call in seconds; 0: none.");
ABSL_FLAG(std::string, service, "", "health: the service or model to check; empty: overall.");
ABSL_FLAG(int, concurrency, 8, "bench: streams open at once.");
ABSL_FLAG(double, rate, 0,
          "bench: > 0: start streams at this mean rate per second (Poisson arrivals, an open "
          "loop) instead of keeping --concurrency open.");
ABSL_FLAG(int64_t, prompt_tokens, 128, "bench: prompt length in tokens.");
ABSL_FLAG(double, duration_s, 10, "bench: how long to keep starting streams.");
ABSL_FLAG(int64_t, streams, 0, "bench: stop after this many streams (overrides duration).");
ABSL_FLAG(double, read_delay_ms, 0, "bench: pause between reads of one stream (slow readers).");
ABSL_FLAG(bool, progress, true, "bench: show progress on stderr.");
ABSL_FLAG(std::string, http, "",
          "bench: host:port of the server's OpenAI HTTP API (its --http_port): the same load as "
          "streamed /v1/completions over plain HTTP instead of gRPC (--server still names the "
          "gRPC port, which lists the models).");
ABSL_FLAG(bool, distinct_prompts, true,
          "bench: each stream's prompt starts with its own tokens, so none reuses another's "
          "cached state; false: every stream sends the same prompt.");
ABSL_FLAG(std::string, state_in, "",
          "generate, stream: continue the sequence whose state this file holds (written by "
          "--state_out); the prompt is then only the new text.");
ABSL_FLAG(std::string, state_out, "",
          "generate, stream: write the sequence's state to this file (GenerateRequest."
          "return_state).");
ABSL_FLAG(bool, tls, false, "Connect over TLS (implied by --tls_ca, --tls_cert, --tls_key).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates that signed the server's; empty: system roots.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers that require one.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the server's certificate instead of --server's host.");
ABSL_FLAG(std::string, api_key, "",
          "API key sent as \"authorization: Bearer <key>\"; empty: $ATTN_API_KEY if set.");
ABSL_FLAG(std::vector<std::string>, servers, {},
          "chat: servers to use in turn, round-robin (default: --server).");
ABSL_FLAG(bool, hold_state, true,
          "chat: keep the conversation's state on the client and send only each turn's new "
          "text; false: send the whole conversation every turn.");
ABSL_FLAG(std::string, system_file, "", "chat: a file whose text starts every conversation.");
ABSL_FLAG(bool, fresh_turns, false,
          "chat: every line starts a new conversation after the system text (shared-prefix "
          "benchmarks).");
ABSL_FLAG(absl::Duration, pause, absl::ZeroDuration(),
          "chat: wait this long before each turn after the first, as a reader would.");

namespace {

using attn::v1::TextGeneration;

int Fail(const grpc::Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", attn::client::StatusCodeName(status.error_code()),
               status.error_message().c_str());
  return 1;
}

void PrintJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

bool ParseIds(const std::string& text, std::vector<int64_t>* ids) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) return false;
    ids->push_back(id);
  }
  return true;
}

void SetDeadline(grpc::ClientContext* context) {
  const double timeout = absl::GetFlag(FLAGS_timeout_s);
  if (timeout > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(timeout * 1e6)));
  }
}

bool BuildGenerateRequest(attn::v1::GenerateRequest* request) {
  request->set_model(absl::GetFlag(FLAGS_model));
  std::vector<int64_t> ids;
  if (!ParseIds(absl::GetFlag(FLAGS_ids), &ids)) {
    std::fprintf(stderr, "error: --ids: not a comma-separated list of integers\n");
    return false;
  }
  if (ids.empty()) request->set_prompt(absl::GetFlag(FLAGS_prompt));
  for (int64_t id : ids) request->add_prompt_token_ids(id);
  request->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  request->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  request->set_top_k(absl::GetFlag(FLAGS_top_k));
  request->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  request->set_repetition_penalty(static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty)));
  if (absl::GetFlag(FLAGS_seed) >= 0) request->set_seed(absl::GetFlag(FLAGS_seed));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) request->add_stop(stop);
  request->set_logprobs(absl::GetFlag(FLAGS_logprobs));
  request->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  const std::string state_in = absl::GetFlag(FLAGS_state_in);
  if (!state_in.empty()) {
    absl::StatusOr<std::string> state = attn::ReadFileBytes(state_in, "--state_in=");
    if (!state.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(state.status().message()).c_str());
      return false;
    }
    request->set_state(*std::move(state));
  }
  request->set_return_state(!absl::GetFlag(FLAGS_state_out).empty());
  const std::string initial_state = absl::GetFlag(FLAGS_initial_state);
  if (!initial_state.empty()) request->set_initial_state(initial_state);
  return true;
}

// --state_out: the state the last message carries. Returns an exit code.
int WriteState(const attn::v1::GenerateResponse& last) {
  const std::string path = absl::GetFlag(FLAGS_state_out);
  if (path.empty()) return 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << last.state();
  if (!file.flush()) {
    std::fprintf(stderr, "error: --state_out=%s: cannot write it\n", path.c_str());
    return 1;
  }
  std::fprintf(stderr, "[state: %zu bytes after %ld tokens written to %s]\n", last.state().size(),
               static_cast<long>(last.state_tokens()), path.c_str());
  return 0;
}

void PrintFinish(const attn::v1::GenerateResponse& last) {
  std::fprintf(stderr, "\n[finish_reason=%s prompt_tokens=%ld completion_tokens=%ld]\n",
               attn::v1::FinishReason_Name(last.finish_reason()).c_str(),
               static_cast<long>(last.usage().prompt_tokens()),
               static_cast<long>(last.usage().completion_tokens()));
}

int Models(TextGeneration::Stub& stub) {
  grpc::ClientContext context;
  SetDeadline(&context);
  attn::v1::ListModelsResponse response;
  grpc::Status status = stub.ListModels(&context, attn::v1::ListModelsRequest(), &response);
  if (!status.ok()) return Fail(status);
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(response);
    return 0;
  }
  std::printf("%-14s %-11s %-11s %-8s %10s %6s %12s %14s %6s %-7s %s\n", "NAME", "MIXER", "BACKEND",
              "WEIGHTS", "PARAMS", "VOCAB", "MAX_CONTEXT", "STATE_BYTES", "DEVICE", "DEFAULT",
              "CHAT");
  for (const auto& m : response.models()) {
    // The model's own template (and the tool calls it writes), else its format.
    std::string chat = m.has_chat_template() ? m.chat_template() : m.chat_format();
    if (m.has_tool_call_format()) chat += " (tools: " + m.tool_call_format() + ")";
    std::printf("%-14s %-11s %-11s %-8s %10ld %6ld %12s %14ld %6s %-7s %s\n", m.name().c_str(),
                m.mixer().c_str(), m.backend().c_str(),
                m.has_weight_dtype() ? m.weight_dtype().c_str() : "-",
                static_cast<long>(m.parameters()), static_cast<long>(m.vocab_size()),
                m.max_context() == 0 ? "unbounded" : std::to_string(m.max_context()).c_str(),
                static_cast<long>(m.state_bytes_per_sequence()), m.device().c_str(),
                m.is_default() ? "yes" : "", chat.c_str());
  }
  return 0;
}

int Generate(TextGeneration::Stub& stub) {
  attn::v1::GenerateRequest request;
  if (!BuildGenerateRequest(&request)) return 2;
  grpc::ClientContext context;
  SetDeadline(&context);
  attn::v1::GenerateResponse response;
  grpc::Status status = stub.Generate(&context, request, &response);
  if (!status.ok()) return Fail(status);
  const int written = WriteState(response);
  if (absl::GetFlag(FLAGS_json)) {
    if (!absl::GetFlag(FLAGS_state_out).empty()) response.clear_state();  // it is in the file
    PrintJson(response);
    return written;
  }
  std::printf("%s", response.text().c_str());
  PrintFinish(response);
  return written;
}

int Stream(TextGeneration::Stub& stub) {
  attn::v1::GenerateRequest request;
  if (!BuildGenerateRequest(&request)) return 2;
  grpc::ClientContext context;
  SetDeadline(&context);
  auto reader = stub.GenerateStream(&context, request);
  attn::v1::GenerateResponse response;
  attn::v1::GenerateResponse last;
  const bool json = absl::GetFlag(FLAGS_json);
  while (reader->Read(&response)) {
    last = response;
    if (json) {
      if (!absl::GetFlag(FLAGS_state_out).empty()) response.clear_state();  // it is in the file
      PrintJson(response);
    } else {
      std::printf("%s", response.text().c_str());
      std::fflush(stdout);
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Fail(status);
  if (!json) PrintFinish(last);
  return WriteState(last);
}

// The text `ids` decode to.
grpc::Status Detokenized(TextGeneration::Stub& stub, const std::string& model,
                         const std::vector<int64_t>& ids, std::string* text) {
  attn::v1::DetokenizeRequest request;
  request.set_model(model);
  for (int64_t id : ids) request.add_token_ids(id);
  grpc::ClientContext context;
  SetDeadline(&context);
  attn::v1::DetokenizeResponse response;
  grpc::Status status = stub.Detokenize(&context, request, &response);
  *text = response.text();
  return status;
}

// Each distinct token's text as it reads inside a text, leading space
// included: decoding a token alone drops the space a word-start piece
// carries, so it is decoded after `anchor` and the anchor's text removed.
grpc::Status TokenTexts(TextGeneration::Stub& stub, const std::string& model, int64_t anchor,
                        std::map<int64_t, std::string>* texts) {
  std::string anchor_text;
  grpc::Status status = Detokenized(stub, model, {anchor}, &anchor_text);
  for (auto& [id, text] : *texts) {
    if (!status.ok()) break;
    status = Detokenized(stub, model, {anchor, id}, &text);
    text.erase(0, std::min(anchor_text.size(), text.size()));
  }
  return status;
}

// `text` in double quotes, with quotes, backslashes and control characters
// escaped, so that spaces and newlines inside a token show.
std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The text to score or tokenize: --text, or the contents of --text_file
// (for texts longer than a command-line argument may be).
bool TextFromFlags(std::string* text) {
  const std::string path = absl::GetFlag(FLAGS_text_file);
  if (path.empty()) {
    *text = absl::GetFlag(FLAGS_text);
    return true;
  }
  absl::StatusOr<std::string> contents = attn::ReadFileBytes(path, "--text_file=");
  if (!contents.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(contents.status().message()).c_str());
    return false;
  }
  *text = *std::move(contents);
  return true;
}

// The loss per position segment: segment, tokens, mean -logprob, perplexity.
void PrintSegments(const attn::v1::ScoreResponse& response, const std::vector<int64_t>& bounds) {
  const std::vector<float> logprobs(response.logprobs().begin(), response.logprobs().end());
  std::printf("%-13s %7s %9s %11s\n", "positions", "tokens", "mean_nll", "perplexity");
  for (const auto& s : attn::client::ScoreBySegment(logprobs, bounds)) {
    std::printf("%-13s %7ld %9.4f %11.2f\n", absl::StrCat(s.begin, "-", s.end).c_str(),
                static_cast<long>(s.tokens), s.mean_nll, std::exp(s.mean_nll));
  }
  std::printf("all %ld tokens: total_logprob %.4f  perplexity %.3f\n",
              static_cast<long>(response.token_ids_size()), response.total_logprob(),
              response.perplexity());
}

// --score_tokens: the text's first N token ids, through the server's tokenizer.
grpc::Status FirstTokens(TextGeneration::Stub& stub, const std::string& text, int64_t count,
                         std::vector<int64_t>* ids) {
  attn::v1::TokenizeRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  request.set_text(text);
  grpc::ClientContext context;
  SetDeadline(&context);
  attn::v1::TokenizeResponse response;
  grpc::Status status = stub.Tokenize(&context, request, &response);
  if (!status.ok()) return status;
  const int64_t kept = std::min<int64_t>(count, response.token_ids_size());
  ids->assign(response.token_ids().begin(), response.token_ids().begin() + kept);
  return grpc::Status::OK;
}

int Score(TextGeneration::Stub& stub) {
  auto bounds = attn::client::ParseSegmentBounds(absl::GetFlag(FLAGS_segments));
  if (!bounds.ok()) {
    std::fprintf(stderr, "%s\n", std::string(bounds.status().message()).c_str());
    return 2;
  }
  attn::v1::ScoreRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  std::vector<int64_t> ids;
  if (!ParseIds(absl::GetFlag(FLAGS_ids), &ids)) return 2;
  std::string text;
  if (ids.empty() && !TextFromFlags(&text)) return 2;
  if (ids.empty() && absl::GetFlag(FLAGS_score_tokens) > 0) {
    grpc::Status status = FirstTokens(stub, text, absl::GetFlag(FLAGS_score_tokens), &ids);
    if (!status.ok()) return Fail(status);
  }
  if (ids.empty()) request.set_text(text);
  for (int64_t id : ids) request.add_token_ids(id);
  grpc::ClientContext context;
  SetDeadline(&context);
  attn::v1::ScoreResponse response;
  grpc::Status status = stub.Score(&context, request, &response);
  if (!status.ok()) return Fail(status);
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(response);
    return 0;
  }
  if (!absl::GetFlag(FLAGS_segments).empty()) {
    PrintSegments(response, *bounds);
    return 0;
  }
  std::map<int64_t, std::string> texts;
  for (int64_t id : response.token_ids()) texts.emplace(id, "");
  if (!texts.empty()) {
    grpc::Status status = TokenTexts(stub, response.model(), response.token_ids(0), &texts);
    if (!status.ok()) return Fail(status);
  }
  std::printf("%8s %10s  %s\n", "token", "logprob", "text");
  for (int i = 0; i < response.token_ids_size(); ++i) {
    const int64_t id = response.token_ids(i);
    std::printf("%8ld %10.4f  %s\n", static_cast<long>(id), response.logprobs(i),
                Quoted(texts[id]).c_str());
  }
  std::printf("total_logprob %.4f  perplexity %.3f\n", response.total_logprob(),
              response.perplexity());
  return 0;
}

int Tokenize(TextGeneration::Stub& stub) {
  attn::v1::TokenizeRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  if (!TextFromFlags(request.mutable_text())) return 2;
  grpc::ClientContext context;
  attn::v1::TokenizeResponse response;
  grpc::Status status = stub.Tokenize(&context, request, &response);
  if (!status.ok()) return Fail(status);
  PrintJson(response);
  return 0;
}

int Detokenize(TextGeneration::Stub& stub) {
  attn::v1::DetokenizeRequest request;
  request.set_model(absl::GetFlag(FLAGS_model));
  std::vector<int64_t> ids;
  if (!ParseIds(absl::GetFlag(FLAGS_ids), &ids)) return 2;
  for (int64_t id : ids) request.add_token_ids(id);
  grpc::ClientContext context;
  attn::v1::DetokenizeResponse response;
  grpc::Status status = stub.Detokenize(&context, request, &response);
  if (!status.ok()) return Fail(status);
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(response);
  } else {
    std::printf("%s\n", response.text().c_str());
  }
  return 0;
}

int Bench(const std::shared_ptr<grpc::Channel>& channel) {
  attn::client::BenchOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  options.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  options.duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  options.total_streams = absl::GetFlag(FLAGS_streams);
  options.read_delay = absl::Milliseconds(absl::GetFlag(FLAGS_read_delay_ms));
  options.progress = absl::GetFlag(FLAGS_progress);
  options.json = absl::GetFlag(FLAGS_json);
  options.distinct_prompts = absl::GetFlag(FLAGS_distinct_prompts);
  options.http = absl::GetFlag(FLAGS_http);
  options.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* key = std::getenv("ATTN_API_KEY"); options.api_key.empty() && key != nullptr) {
    options.api_key = key;
  }
  if (!options.http.empty() && (options.rate > 0 || options.read_delay > absl::ZeroDuration())) {
    std::fprintf(stderr, "error: --http runs at --concurrency: no --rate or --read_delay_ms\n");
    return 2;
  }
  if (options.concurrency < 1 || options.prompt_tokens < 1 || options.max_tokens < 1) {
    std::fprintf(stderr, "error: --concurrency, --prompt_tokens and --max_tokens must be >= 1\n");
    return 2;
  }
  if (!(options.rate >= 0)) {
    std::fprintf(stderr, "error: --rate must be >= 0 (0: closed loop at --concurrency)\n");
    return 2;
  }
  return attn::client::RunBench(channel, options);
}

// A channel to `address` with the --tls_* and --api_key flags; exits with
// an error naming the flag if they are wrong.
std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  attn::client::ChannelSecurity security;
  security.tls = absl::GetFlag(FLAGS_tls);
  security.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  security.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  security.tls_key = absl::GetFlag(FLAGS_tls_key);
  security.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  security.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* key = std::getenv("ATTN_API_KEY"); security.api_key.empty() && key != nullptr) {
    security.api_key = key;
  }
  grpc::ChannelArguments arguments;
  // A returned state is as large as the server allows
  // (--max_exported_state_bytes, 64 MiB by default) plus the reply.
  arguments.SetMaxReceiveMessageSize(256 << 20);
  auto channel = attn::client::OpenChannel(address, security, arguments);
  if (!channel.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(channel.status().message()).c_str());
    std::exit(2);
  }
  return *std::move(channel);
}

// The chat format of `model` (empty: the default) as the server lists it.
bool ModelChatFormat(const std::shared_ptr<grpc::Channel>& channel, const std::string& model,
                     attn::ChatFormat* format) {
  grpc::ClientContext context;
  SetDeadline(&context);
  attn::v1::ListModelsResponse response;
  grpc::Status status = TextGeneration::NewStub(channel)->ListModels(
      &context, attn::v1::ListModelsRequest(), &response);
  if (!status.ok()) return Fail(status) == 0;
  for (const attn::v1::ModelInfo& info : response.models()) {
    if (model.empty() ? info.is_default() : info.name() == model) {
      // A server older than chat formats lists none: plain.
      if (!info.chat_format().empty() && !attn::ParseChatFormat(info.chat_format(), format)) {
        std::fprintf(stderr, "error: model %s has chat format \"%s\", unknown to this attnctl\n",
                     info.name().c_str(), info.chat_format().c_str());
        return false;
      }
      return true;
    }
  }
  std::fprintf(stderr, "error: the server hosts no model \"%s\"\n", model.c_str());
  return false;
}

int Chat() {
  attn::client::ChatOptions options;
  options.server_names = absl::GetFlag(FLAGS_servers);
  if (options.server_names.empty()) options.server_names = {absl::GetFlag(FLAGS_server)};
  for (const std::string& server : options.server_names) {
    options.servers.push_back(Channel(server));
  }
  if (!BuildGenerateRequest(&options.base)) return 2;
  options.base.clear_prompt();
  options.base.clear_return_state();
  options.hold_state = absl::GetFlag(FLAGS_hold_state);
  if (!ModelChatFormat(options.servers.front(), options.base.model(), &options.format)) return 1;
  options.fresh_turns = absl::GetFlag(FLAGS_fresh_turns);
  options.pause = absl::GetFlag(FLAGS_pause);
  options.json = absl::GetFlag(FLAGS_json);
  options.interactive = isatty(STDIN_FILENO) != 0;
  const std::string system_file = absl::GetFlag(FLAGS_system_file);
  if (!system_file.empty()) {
    absl::StatusOr<std::string> text = attn::ReadFileBytes(system_file, "--system_file=");
    if (!text.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(text.status().message()).c_str());
      return 2;
    }
    options.system = *std::move(text);
  }
  return attn::client::RunChat(std::cin, options);
}

// Every command, in the order the usage lists them: the one list that the
// usage, the dispatch and the README's table (checked by a test) follow.
struct Command {
  const char* name;
  const char* summary;
  std::function<int(const std::shared_ptr<grpc::Channel>&)> run;
};

const std::vector<Command>& Commands() {
  using ChannelPtr = std::shared_ptr<grpc::Channel>;
  static const auto* commands = new std::vector<Command>{
      {"models", "list the hosted models",
       [](const ChannelPtr& c) { return Models(*TextGeneration::NewStub(c)); }},
      {"generate", "one completion, printed when it is done",
       [](const ChannelPtr& c) { return Generate(*TextGeneration::NewStub(c)); }},
      {"stream", "one completion, printed token by token",
       [](const ChannelPtr& c) { return Stream(*TextGeneration::NewStub(c)); }},
      {"chat", "a conversation on the terminal; the state stays with the client",
       [](const ChannelPtr&) { return Chat(); }},
      {"score", "the log-probability of every token of a text",
       [](const ChannelPtr& c) { return Score(*TextGeneration::NewStub(c)); }},
      {"tokenize", "text to token ids",
       [](const ChannelPtr& c) { return Tokenize(*TextGeneration::NewStub(c)); }},
      {"detokenize", "token ids to text",
       [](const ChannelPtr& c) { return Detokenize(*TextGeneration::NewStub(c)); }},
      {"health", "grpc.health.v1: the server, or one service or model",
       [](const ChannelPtr& c) {
         return attn::client::CheckHealth(c, absl::GetFlag(FLAGS_service),
                                          absl::GetFlag(FLAGS_timeout_s));
       }},
      {"bench", "a load generator: streams at a concurrency or rate, latency percentiles",
       [](const ChannelPtr& c) { return Bench(c); }},
  };
  return *commands;
}

std::string Usage() {
  std::string usage = "attnctl COMMAND [flags]\n\ncommands:\n";
  for (const Command& command : Commands()) {
    absl::StrAppend(&usage, "  ", command.name, std::string(12 - std::strlen(command.name), ' '),
                    command.summary, "\n");
  }
  return usage;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(Usage());
  attn::ListFlagsOfFolderInHelp(__FILE__);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: %s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  const std::string name = args[1];
  for (const Command& command : Commands()) {
    if (name == command.name) return command.run(Channel(absl::GetFlag(FLAGS_server)));
  }
  std::fprintf(stderr, "unknown command \"%s\"; usage: %s\n", name.c_str(),
               absl::ProgramUsageMessage().data());
  return 2;
}
