#include "server/state/state_blob.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/backend/backend.h"
#include "util/field_error.h"
#include "util/hash64.h"

namespace attn::serving {
namespace {

constexpr absl::string_view kMagic = "ATSB";
constexpr int kMaxRank = 8;
constexpr uint32_t kMaxTensors = 4096;
constexpr uint32_t kMaxFingerprint = 256;

// The dtypes a state may hold, by their code in the format.
constexpr std::array<std::pair<uint8_t, torch::ScalarType>, 10> kDtypes = {{
    {1, torch::kFloat},
    {2, torch::kDouble},
    {3, torch::kHalf},
    {4, torch::kBFloat16},
    {5, torch::kLong},
    {6, torch::kInt},
    {7, torch::kShort},
    {8, torch::kChar},
    {9, torch::kByte},
    {10, torch::kBool},
}};

// Appends the little-endian bytes of `value` (the hosts this runs on are).
template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads the blob front to back; every read checks that the bytes are there.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  absl::Status Get(T* value, const char* what) {
    if (absl::Status room = Need(sizeof(T), what); !room.ok()) return room;
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status Bytes(size_t count, absl::string_view* out, const char* what) {
    if (absl::Status room = Need(count, what); !room.ok()) return room;
    *out = bytes_.substr(at_, count);
    at_ += count;
    return absl::OkStatus();
  }
  size_t at() const { return at_; }
  size_t left() const { return bytes_.size() - at_; }

 private:
  absl::Status Need(size_t count, const char* what) const {
    if (count <= left()) return absl::OkStatus();
    return InvalidField("state", "truncated: ", what, " needs ", count, " bytes at byte ", at_,
                        " of ", bytes_.size());
  }
  absl::string_view bytes_;
  size_t at_ = 0;
};

absl::Status Corrupt(const std::string& what) {
  return InvalidField("state", "not a state blob: ", what);
}

absl::StatusOr<torch::Tensor> ReadTensor(Reader& in, uint32_t index) {
  uint8_t code = 0, rank = 0;
  if (absl::Status s = in.Get(&code, "a tensor's dtype"); !s.ok()) return s;
  if (absl::Status s = in.Get(&rank, "a tensor's rank"); !s.ok()) return s;
  auto dtype = std::find_if(kDtypes.begin(), kDtypes.end(),
                            [code](const auto& entry) { return entry.first == code; });
  if (dtype == kDtypes.end()) return Corrupt(absl::StrCat("tensor ", index, ": dtype ", code));
  if (rank > kMaxRank) return Corrupt(absl::StrCat("tensor ", index, ": rank ", rank));
  std::vector<int64_t> sizes(rank);
  uint64_t bytes = torch::elementSize(dtype->second);
  for (int64_t& size : sizes) {
    if (absl::Status s = in.Get(&size, "a tensor's size"); !s.ok()) return s;
    // Bounded by the bytes left before multiplying, so nothing overflows.
    if (size < 0 || (size > 0 && bytes > in.left() / static_cast<uint64_t>(size))) {
      return Corrupt(absl::StrCat("tensor ", index, ": size ", size, " exceeds the blob"));
    }
    bytes *= static_cast<uint64_t>(size);
  }
  absl::string_view data;
  if (absl::Status s = in.Bytes(bytes, &data, "a tensor's elements"); !s.ok()) return s;
  torch::Tensor tensor = torch::empty(sizes, torch::dtype(dtype->second));
  if (bytes > 0) std::memcpy(tensor.data_ptr(), data.data(), bytes);
  return tensor;
}

}  // namespace

std::string EncodeStateBlob(const StateBlob& blob) {
  std::string out(kMagic);
  Put(out, kStateBlobVersion);
  Put(out, static_cast<uint32_t>(blob.fingerprint.size()));
  out += blob.fingerprint;
  Put(out, blob.tokens);
  Put(out, static_cast<uint32_t>(blob.row->tensors.size()));
  for (const torch::Tensor& t : blob.row->tensors) {
    const torch::Tensor cpu = t.to(torch::kCPU).contiguous();
    auto dtype = std::find_if(kDtypes.begin(), kDtypes.end(),
                              [&](const auto& entry) { return entry.second == cpu.scalar_type(); });
    TORCH_CHECK(dtype != kDtypes.end(), "a state tensor of dtype ", cpu.scalar_type(),
                " has no code in the state blob format");
    Put(out, dtype->first);
    Put(out, static_cast<uint8_t>(cpu.dim()));
    for (int64_t size : cpu.sizes()) Put(out, size);
    out.append(static_cast<const char*>(cpu.data_ptr()), cpu.numel() * cpu.element_size());
  }
  Put(out, Hash64(out));
  return out;
}

absl::StatusOr<StateBlob> DecodeStateBlob(absl::string_view bytes) {
  if (bytes.size() < kMagic.size() + sizeof(uint64_t) || bytes.substr(0, 4) != kMagic) {
    return Corrupt("it does not start with \"ATSB\"; send back GenerateResponse.state unchanged");
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - sizeof(uint64_t));
  uint64_t checksum = 0;
  std::memcpy(&checksum, bytes.data() + body.size(), sizeof(checksum));
  Reader in(body);
  absl::string_view magic;
  uint32_t version = 0;
  in.Bytes(kMagic.size(), &magic, "the magic").IgnoreError();  // checked above
  if (absl::Status s = in.Get(&version, "the version"); !s.ok()) return s;
  if (version != kStateBlobVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state: format version ", version, "; this server reads version ", kStateBlobVersion));
  }
  if (Hash64(body) != checksum) {
    return Corrupt("the checksum does not match: the bytes were truncated or changed");
  }
  StateBlob blob;
  uint32_t length = 0, count = 0;
  absl::string_view fingerprint;
  if (absl::Status s = in.Get(&length, "the fingerprint's length"); !s.ok()) return s;
  if (length > kMaxFingerprint) return Corrupt(absl::StrCat("a fingerprint of ", length, " bytes"));
  if (absl::Status s = in.Bytes(length, &fingerprint, "the fingerprint"); !s.ok()) return s;
  blob.fingerprint = std::string(fingerprint);
  if (absl::Status s = in.Get(&blob.tokens, "the token count"); !s.ok()) return s;
  if (blob.tokens < 0) return Corrupt(absl::StrCat("a token count of ", blob.tokens));
  if (absl::Status s = in.Get(&count, "the tensor count"); !s.ok()) return s;
  if (count > kMaxTensors) return Corrupt(absl::StrCat(count, " tensors"));
  auto row = std::make_shared<SavedRow>();
  for (uint32_t i = 0; i < count; ++i) {
    absl::StatusOr<torch::Tensor> tensor = ReadTensor(in, i);
    if (!tensor.ok()) return tensor.status();
    row->tensors.push_back(*std::move(tensor));
  }
  blob.row = std::move(row);
  if (in.left() != 0) return Corrupt(absl::StrCat(in.left(), " bytes after the last tensor"));
  return blob;
}

std::string ModelFingerprint(const std::string& mixer, uint64_t file_hash) {
  return absl::StrFormat("%s-%016x", mixer, file_hash);
}

}  // namespace attn::serving
