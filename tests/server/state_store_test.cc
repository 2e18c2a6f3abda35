// The shared state tier's parts: stored entries (encode, decode, verify),
// Redis URLs, and StateStore against a real redis-server started here on
// 127.0.0.1 (a free port, its own directory): the longest stored prefix at
// token granularity across index anchors, TTLs, edited entries, and an
// unreachable Redis. The servers' end-to-end behaviour is in
// state_store_redis.sh.
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "server/state/redis_connection.h"
#include "server/state/redis_state_store.h"
#include "server/state/sequence_origin.h"
#include "server/state/state_blob.h"
#include "server/state/stored_state.h"

extern char** environ;

namespace attn::serving {
namespace {

// A TCP port on 127.0.0.1 that nothing listens on.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

constexpr char kFingerprint[] = "aft-decay-0123456789abcdef";

std::vector<int64_t> Tokens(int64_t n, int64_t first = 1) {
  std::vector<int64_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = first + i * 7 % 50;
  return tokens;
}

std::shared_ptr<const SavedRow> Row(float value) {
  auto row = std::make_shared<SavedRow>();
  row->tensors = {torch::full({2, 3}, value), torch::arange(4, torch::kFloat)};
  return row;
}

std::string Entry(const std::vector<int64_t>& tokens, uint64_t origin = kEmptySequenceOrigin,
                  const std::string& fingerprint = kFingerprint) {
  const std::string blob =
      EncodeStateBlob({fingerprint, static_cast<int64_t>(tokens.size()), Row(1)});
  return EncodeStoredState(origin, tokens, blob);
}

TEST(StoredStateTest, RoundTripsAndVerifies) {
  const std::vector<int64_t> tokens = Tokens(70);
  const std::string entry = Entry(tokens);
  absl::StatusOr<StoredState> decoded = DecodeStoredState(entry);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->tokens, tokens);
  EXPECT_EQ(decoded->origin, kEmptySequenceOrigin);
  absl::StatusOr<StateBlob> blob =
      VerifyStoredState(entry, kEmptySequenceOrigin, tokens, kFingerprint);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_TRUE(torch::equal(blob->row->tensors[0], torch::full({2, 3}, 1.0f)));
}

TEST(StoredStateTest, RefusesWhatIsNotTheAskedPrefix) {
  const std::vector<int64_t> tokens = Tokens(10);
  const std::string entry = Entry(tokens);
  std::vector<int64_t> other = tokens;
  other[4] += 1;
  auto expect_damaged = [](const absl::Status& status, const std::string& says) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find(says), std::string::npos) << status;
  };
  expect_damaged(VerifyStoredState(entry, 7, tokens, kFingerprint).status(), "another origin");
  expect_damaged(VerifyStoredState(entry, kEmptySequenceOrigin, other, kFingerprint).status(),
                 "other tokens");
  expect_damaged(VerifyStoredState(entry, kEmptySequenceOrigin, tokens, "linear-elu-00").status(),
                 "another model");
  // A blob that claims another token count than its entry.
  const std::string blob = EncodeStateBlob({kFingerprint, 11, Row(1)});
  expect_damaged(VerifyStoredState(EncodeStoredState(kEmptySequenceOrigin, tokens, blob),
                                   kEmptySequenceOrigin, tokens, kFingerprint)
                     .status(),
                 "a blob of 11 tokens");
  // Every single-byte edit and every truncation is refused.
  for (size_t at = 0; at < entry.size(); at += 3) {
    std::string edited = entry;
    edited[at] ^= 0x20;
    EXPECT_FALSE(VerifyStoredState(edited, kEmptySequenceOrigin, tokens, kFingerprint).ok())
        << "byte " << at;
    EXPECT_FALSE(
        VerifyStoredState(entry.substr(0, at), kEmptySequenceOrigin, tokens, kFingerprint).ok())
        << "first " << at << " bytes";
  }
}

TEST(RedisUrlTest, ParsesEveryPart) {
  absl::StatusOr<RedisAddress> plain = ParseRedisUrl("redis://cache");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->host, "cache");
  EXPECT_EQ(plain->port, 6379);
  EXPECT_EQ(plain->db, 0);
  absl::StatusOr<RedisAddress> full = ParseRedisUrl("redis://attn:s3cr:et@10.0.0.5:6380/3");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->user, "attn");
  EXPECT_EQ(full->password, "s3cr:et");
  EXPECT_EQ(full->host, "10.0.0.5");
  EXPECT_EQ(full->port, 6380);
  EXPECT_EQ(full->db, 3);
  absl::StatusOr<RedisAddress> password_only = ParseRedisUrl("redis://:pw@localhost");
  ASSERT_TRUE(password_only.ok()) << password_only.status();
  EXPECT_EQ(password_only->user, "");
  EXPECT_EQ(password_only->password, "pw");
  for (const char* bad : {"", "cache:6379", "rediss://cache", "redis://", "redis://h:0",
                          "redis://h:99999", "redis://h:x", "redis://h/x", "redis://pw@h"}) {
    absl::StatusOr<RedisAddress> parsed = ParseRedisUrl(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--state_store"), std::string::npos) << bad;
  }
}

// A redis-server of its own for each test.
class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("attn-redis-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
    const std::string port = std::to_string(port_), dir = dir_.string(),
                      log = (dir_ / "redis.log").string();
    std::vector<std::string> args = {
        "redis-server", "--bind", "127.0.0.1",    "--port", port,        "--dir", dir,
        "--save",       "",       "--appendonly", "no",     "--logfile", log,     "--supervised",
        "systemd"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    // Redis tells a supervisor it is ready ("READY=1" on NOTIFY_SOCKET), as
    // under systemd: the test waits for that message, not for time to pass.
    const std::string notify_path = (dir_ / "notify").string();
    const int notify = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    notify_path.copy(address.sun_path, sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(notify, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    timeval limit{10, 0};
    setsockopt(notify, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("NOTIFY_SOCKET=" + notify_path);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    ASSERT_EQ(posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), envp.data()), 0)
        << "needs redis-server: run scripts/install_deps.sh";
    std::string said;
    char message[512];
    ssize_t got = 0;
    while (said.find("READY=1") == std::string::npos &&
           (got = recv(notify, message, sizeof(message), 0)) > 0) {
      said.append(message, got);
    }
    close(notify);
    ASSERT_NE(said.find("READY=1"), std::string::npos)
        << "redis-server did not say it was ready on port " << port_ << " (" << said << ")";
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  std::string Url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  std::unique_ptr<StateStore> Start(absl::Duration ttl = absl::Hours(1)) {
    StateStoreOptions options;
    options.url = Url();
    options.ttl = ttl;
    options.timeout = absl::Seconds(2);
    auto store = RedisStateStore::Start(options, &written_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static StoreHit Find(StateStore& store, const std::vector<int64_t>& tokens,
                       int64_t min_tokens = 1) {
    std::promise<StoreHit> answer;
    store.Lookup({kFingerprint, kEmptySequenceOrigin, tokens, min_tokens,
                  [&answer](StoreHit hit) { answer.set_value(std::move(hit)); }});
    return answer.get_future().get();
  }

  // Writes the states after the first n of `tokens` for each n, and waits
  // until Redis holds them (the store's observer hears of each batch).
  void WriteAll(StateStore& store, const std::vector<int64_t>& tokens,
                const std::vector<int64_t>& lengths) {
    const int64_t before = written_.entries();
    for (int64_t n : lengths) {
      store.Write(kFingerprint, kEmptySequenceOrigin, {tokens.begin(), tokens.begin() + n},
                  Row(static_cast<float>(n)));
    }
    ASSERT_TRUE(written_.AwaitEntries(before + static_cast<int64_t>(lengths.size())))
        << "the writes did not land";
  }

  // Counts the entries the store wrote.
  class WriteCounter : public StateStoreObserver {
   public:
    void OnWrite(int64_t entries, int64_t /*bytes*/) override {
      absl::MutexLock lock(&mu_);
      entries_ += entries;
    }
    int64_t entries() {
      absl::MutexLock lock(&mu_);
      return entries_;
    }
    bool AwaitEntries(int64_t count) {
      absl::MutexLock lock(&mu_);
      auto reached = [this, count]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entries_ >= count; };
      return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
    }

   private:
    absl::Mutex mu_;
    int64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  };
  WriteCounter written_;

  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(StateStoreTest, FindsTheLongestStoredPrefixAcrossAnchors) {
  std::unique_ptr<StateStore> store = Start();
  ASSERT_NE(store, nullptr);
  const std::vector<int64_t> tokens = Tokens(300);
  WriteAll(*store, tokens, {5, 64, 65, 130, 200});
  auto prefix = [&](int64_t n) { return std::vector<int64_t>(tokens.begin(), tokens.begin() + n); };
  struct Case {
    int64_t length, min_tokens, expected;
  };
  for (const Case& c : {Case{300, 1, 200}, Case{201, 1, 200}, Case{200, 1, 130}, Case{131, 1, 130},
                        Case{130, 1, 65}, Case{66, 1, 65}, Case{65, 1, 64}, Case{64, 1, 5},
                        Case{6, 1, 5}, Case{5, 1, 0}, Case{300, 201, 0}, Case{300, 131, 200}}) {
    StoreHit hit = Find(*store, prefix(c.length), c.min_tokens);
    EXPECT_EQ(hit.tokens, c.expected) << c.length << " tokens, at least " << c.min_tokens;
    if (hit.tokens > 0) {
      EXPECT_TRUE(torch::equal(hit.row->tensors[0], torch::full({2, 3}, float(c.expected))));
    }
  }
  // Another conversation that shares the first 100 tokens reuses up to 65.
  std::vector<int64_t> branch = prefix(100);
  branch.insert(branch.end(), {999, 998, 997});
  EXPECT_EQ(Find(*store, branch).tokens, 65);
}

TEST_F(StateStoreTest, EditedAndExpiredEntriesAreMisses) {
  std::unique_ptr<StateStore> store = Start(absl::Seconds(1));
  ASSERT_NE(store, nullptr);
  const std::vector<int64_t> tokens = Tokens(40);
  WriteAll(*store, tokens, {20});
  RedisConnection redis(*ParseRedisUrl(Url()));
  auto keys = redis.Pipeline({{"KEYS", "attn:state:*"}}, absl::Seconds(1));
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ((*keys)[0].elements.size(), 1u);
  const std::string key = (*keys)[0].elements[0].text;
  ASSERT_EQ(Find(*store, tokens).tokens, 20);
  ASSERT_TRUE(redis.Pipeline({{"SETRANGE", key, "30", "?"}}, absl::Seconds(1)).ok());
  EXPECT_EQ(Find(*store, tokens).tokens, 0);
  // The TTL ends it: Redis holds it for at most the store's TTL.
  auto ttl = redis.Pipeline({{"PTTL", key}}, absl::Seconds(1));
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT((*ttl)[0].integer, 0);
  EXPECT_LE((*ttl)[0].integer, 1000);
}

TEST_F(StateStoreTest, AnUnreachableRedisAnswersMissesAtOnce) {
  TearDown();
  pid_ = -1;
  std::unique_ptr<StateStore> store = Start();
  ASSERT_NE(store, nullptr);
  const absl::Time start = absl::Now();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Find(*store, Tokens(30)).tokens, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  store->Write(kFingerprint, kEmptySequenceOrigin, Tokens(30), Row(1));  // dropped quietly
}

}  // namespace
}  // namespace attn::serving
