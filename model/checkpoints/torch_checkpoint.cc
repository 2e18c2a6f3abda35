#include "model/checkpoints/torch_checkpoint.h"

#include <torch/torch.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/files.h"
#include "util/zip_integrity.h"

namespace attn {
namespace {

// A value on the unpickler's stack: only what a state dict is made of.
struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor
  };
  Kind kind = Kind::kNone;
  int64_t number = 0;
  std::string text;           // a string, a global's "module.name", a storage's record key
  std::vector<Value*> items;  // tuple, list; a dict's keys and values in turn
  torch::ScalarType dtype = torch::kFloat;  // a storage's
  torch::Tensor tensor;
};
// Values live in the unpickler's arena: a pickle may make cycles (a list
// appended to itself through the memo), which owning pointers would leak.
using ValuePtr = Value*;

template <typename... Parts>
absl::Status Invalid(const Parts&... what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint pickle: ", what...));
}

// The storage types a weights file may use.
bool StorageDtype(const std::string& global, torch::ScalarType* dtype) {
  if (global == "torch.FloatStorage")
    *dtype = torch::kFloat;
  else if (global == "torch.HalfStorage")
    *dtype = torch::kHalf;
  else if (global == "torch.BFloat16Storage")
    *dtype = torch::kBFloat16;
  else if (global == "torch.DoubleStorage")
    *dtype = torch::kDouble;
  else
    return false;
  return true;
}

class Unpickler {
 public:
  Unpickler(absl::string_view pickle, const std::map<std::string, absl::string_view>& records,
            std::string prefix)
      : data_(pickle), records_(records), prefix_(std::move(prefix)) {}

  absl::StatusOr<ValuePtr> Run() {
    while (at_ < data_.size()) {
      const auto op = static_cast<uint8_t>(data_[at_++]);
      if (op == '.') {
        if (stack_.size() != 1) return Invalid("the pickle ends with ", stack_.size(), " values");
        return stack_.back();
      }
      if (absl::Status done = Step(op); !done.ok()) return done;
    }
    return Invalid("no STOP opcode: the pickle is truncated");
  }

 private:
  absl::Status Need(size_t bytes) {
    if (bytes > data_.size() - at_) return Invalid("truncated at byte ", at_);
    return absl::OkStatus();
  }
  absl::Status Skip(size_t bytes) {
    if (auto s = Need(bytes); !s.ok()) return s;
    at_ += bytes;
    return absl::OkStatus();
  }
  uint64_t Unsigned(size_t bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i)
      value |= uint64_t{static_cast<uint8_t>(data_[at_ + i])} << (8 * i);
    at_ += bytes;
    return value;
  }
  absl::StatusOr<ValuePtr> Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      return Invalid("pops an empty stack at byte ", at_);
    }
    ValuePtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  absl::StatusOr<std::vector<ValuePtr>> PopToMark() {
    if (marks_.empty()) return Invalid("no MARK before byte ", at_);
    std::vector<ValuePtr> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void Push(ValuePtr v) { stack_.push_back(std::move(v)); }
  absl::Status Text(size_t length_bytes) {
    if (auto s = Need(length_bytes); !s.ok()) return s;
    const uint64_t length = Unsigned(length_bytes);
    if (auto s = Need(length); !s.ok()) return s;
    auto v = Make(Value::Kind::kString);
    v->text = std::string(data_.substr(at_, length));
    at_ += length;
    Push(v);
    return absl::OkStatus();
  }
  absl::Status Number(int64_t value) {
    auto v = Make(Value::Kind::kInt);
    v->number = value;
    Push(v);
    return absl::OkStatus();
  }
  absl::Status Tuple(size_t count) {
    if (stack_.size() < count + (marks_.empty() ? 0 : marks_.back())) {
      return Invalid("a tuple of ", count, " from a shorter stack");
    }
    auto v = Make(Value::Kind::kTuple);
    v->items.assign(stack_.end() - count, stack_.end());
    stack_.resize(stack_.size() - count);
    Push(v);
    return absl::OkStatus();
  }
  absl::Status Memo(uint64_t key) {
    if (stack_.empty()) return Invalid("memoizes an empty stack");
    memo_[key] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Recall(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return Invalid("recalls memo ", key, ", never stored");
    Push(it->second);
    return absl::OkStatus();
  }
  absl::Status AddItems(std::vector<ValuePtr> items) {
    absl::StatusOr<ValuePtr> target = Pop();
    if (!target.ok()) return target.status();
    const bool dict = (*target)->kind == Value::Kind::kDict;
    if (!dict && (*target)->kind != Value::Kind::kList)
      return Invalid("adds items to a non-container");
    if (dict && items.size() % 2 != 0) return Invalid("a dict item without its value");
    for (auto& item : items) (*target)->items.push_back(std::move(item));
    Push(*target);
    return absl::OkStatus();
  }

  absl::Status Step(uint8_t op);
  absl::Status Global();
  absl::Status PersistentId();
  absl::Status Reduce();
  absl::StatusOr<ValuePtr> RebuildTensor(const std::vector<ValuePtr>& args);

  absl::string_view data_;
  size_t at_ = 0;
  const std::map<std::string, absl::string_view>& records_;
  const std::string prefix_;  // "ARCHIVE/"
  ValuePtr Make(Value::Kind kind) {
    arena_.push_back(std::make_unique<Value>());
    arena_.back()->kind = kind;
    return arena_.back().get();
  }

  std::vector<std::unique_ptr<Value>> arena_;  // every value made, freed together
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

absl::Status Unpickler::Step(uint8_t op) {
  switch (op) {
    case 0x80:  // PROTO
      return Skip(1);
    case 0x95:  // FRAME
      return Skip(8);
    case '}':
      Push(Make(Value::Kind::kDict));
      return absl::OkStatus();
    case ']':
      Push(Make(Value::Kind::kList));
      return absl::OkStatus();
    case ')':
      return Tuple(0);
    case '(':
      marks_.push_back(stack_.size());
      return absl::OkStatus();
    case 'N':
      Push(Make(Value::Kind::kNone));
      return absl::OkStatus();
    case 0x88:
    case 0x89: {
      auto v = Make(Value::Kind::kBool);
      v->number = op == 0x88;
      Push(v);
      return absl::OkStatus();
    }
    case 'X':
      return Text(4);
    case 0x8c:
      return Text(1);
    case 0x8d:
      return Text(8);
    case 'U':
      return Text(1);
    case 'T':
      return Text(4);
    case 'K':
      if (auto s = Need(1); !s.ok()) return s;
      return Number(static_cast<int64_t>(Unsigned(1)));
    case 'M':
      if (auto s = Need(2); !s.ok()) return s;
      return Number(static_cast<int64_t>(Unsigned(2)));
    case 'J':
      if (auto s = Need(4); !s.ok()) return s;
      return Number(static_cast<int32_t>(Unsigned(4)));
    case 0x8a: {  // LONG1: n little-endian two's-complement bytes
      if (auto s = Need(1); !s.ok()) return s;
      const uint64_t n = Unsigned(1);
      if (n > 8) return Invalid("an integer of ", n, " bytes");
      if (auto s = Need(n); !s.ok()) return s;
      uint64_t raw = Unsigned(n);
      if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t{0} << (8 * n);
      return Number(static_cast<int64_t>(raw));
    }
    case 'G': {
      if (auto s = Need(8); !s.ok()) return s;
      at_ += 8;
      Push(Make(Value::Kind::kFloat));  // its value: nothing a weight needs
      return absl::OkStatus();
    }
    case 't': {
      absl::StatusOr<std::vector<ValuePtr>> items = PopToMark();
      if (!items.ok()) return items.status();
      auto v = Make(Value::Kind::kTuple);
      v->items = *std::move(items);
      Push(v);
      return absl::OkStatus();
    }
    case 0x85:
      return Tuple(1);
    case 0x86:
      return Tuple(2);
    case 0x87:
      return Tuple(3);
    case 'q':
      if (auto s = Need(1); !s.ok()) return s;
      return Memo(Unsigned(1));
    case 'r':
      if (auto s = Need(4); !s.ok()) return s;
      return Memo(Unsigned(4));
    case 0x94:
      return Memo(memo_.size());
    case 'h':
      if (auto s = Need(1); !s.ok()) return s;
      return Recall(Unsigned(1));
    case 'j':
      if (auto s = Need(4); !s.ok()) return s;
      return Recall(Unsigned(4));
    case 'c':
      return Global();
    case 'Q':
      return PersistentId();
    case 'R':
      return Reduce();
    case 's':
    case 'a': {
      const size_t count = op == 's' ? 2 : 1;
      if (stack_.size() < count + 1) return Invalid("an item without its container");
      std::vector<ValuePtr> items(stack_.end() - count, stack_.end());
      stack_.resize(stack_.size() - count);
      return AddItems(std::move(items));
    }
    case 'u':
    case 'e': {
      absl::StatusOr<std::vector<ValuePtr>> items = PopToMark();
      if (!items.ok()) return items.status();
      return AddItems(*std::move(items));
    }
    case 'b': {  // BUILD: an OrderedDict's attributes (its _metadata); nothing a weight needs
      absl::StatusOr<ValuePtr> state = Pop();
      if (!state.ok()) return state.status();
      if (stack_.empty() || stack_.back()->kind != Value::Kind::kDict) {
        return Invalid("BUILD of something other than a dict");
      }
      return absl::OkStatus();
    }
    default:
      return Invalid("opcode 0x", absl::Hex(op), " at byte ", at_ - 1,
                     " is not one a state dict of tensors uses");
  }
}

absl::Status Unpickler::Global() {
  const size_t line = data_.find('\n', at_);
  const size_t second = line == absl::string_view::npos ? line : data_.find('\n', line + 1);
  if (second == absl::string_view::npos) return Invalid("a GLOBAL without its names");
  auto v = Make(Value::Kind::kGlobal);
  v->text =
      absl::StrCat(data_.substr(at_, line - at_), ".", data_.substr(line + 1, second - line - 1));
  at_ = second + 1;
  Push(v);
  return absl::OkStatus();
}

absl::Status Unpickler::PersistentId() {
  absl::StatusOr<ValuePtr> id = Pop();
  if (!id.ok()) return id.status();
  const auto& items = (*id)->items;
  if ((*id)->kind != Value::Kind::kTuple || items.size() != 5 ||
      items[0]->kind != Value::Kind::kString || items[0]->text != "storage" ||
      items[1]->kind != Value::Kind::kGlobal || items[2]->kind != Value::Kind::kString) {
    return Invalid("a persistent id that is not a storage");
  }
  auto storage = Make(Value::Kind::kStorage);
  if (!StorageDtype(items[1]->text, &storage->dtype)) {
    return Invalid("storage type ", items[1]->text,
                   "; weights must be float32, float16 or bfloat16");
  }
  storage->text = items[2]->text;
  Push(storage);
  return absl::OkStatus();
}

absl::Status Unpickler::Reduce() {
  absl::StatusOr<ValuePtr> args = Pop();
  if (!args.ok()) return args.status();
  absl::StatusOr<ValuePtr> callable = Pop();
  if (!callable.ok()) return callable.status();
  if ((*callable)->kind != Value::Kind::kGlobal || (*args)->kind != Value::Kind::kTuple) {
    return Invalid("REDUCE of something other than a named call");
  }
  const std::string& name = (*callable)->text;
  const auto& items = (*args)->items;
  if (name == "collections.OrderedDict" && items.empty()) {
    Push(Make(Value::Kind::kDict));
    return absl::OkStatus();
  }
  if (name == "torch._utils._rebuild_tensor_v2") {
    absl::StatusOr<ValuePtr> tensor = RebuildTensor(items);
    if (!tensor.ok()) return tensor.status();
    Push(*tensor);
    return absl::OkStatus();
  }
  if (name == "torch._utils._rebuild_parameter" && !items.empty() &&
      items[0]->kind == Value::Kind::kTensor) {
    Push(items[0]);
    return absl::OkStatus();
  }
  return Invalid("the pickle calls ", name, ", which a file of weights does not need; refused");
}

absl::StatusOr<ValuePtr> Unpickler::RebuildTensor(const std::vector<ValuePtr>& args) {
  auto is_ints = [](const ValuePtr& v) {
    if (v->kind != Value::Kind::kTuple) return false;
    for (const auto& i : v->items) {
      if (i->kind != Value::Kind::kInt || i->number < 0) return false;
    }
    return true;
  };
  if (args.size() < 4 || args[0]->kind != Value::Kind::kStorage ||
      args[1]->kind != Value::Kind::kInt || !is_ints(args[2]) || !is_ints(args[3]) ||
      args[2]->items.size() != args[3]->items.size() || args[1]->number < 0) {
    return Invalid("a tensor rebuilt from malformed arguments");
  }
  const Value& storage = *args[0];
  auto record = records_.find(prefix_ + "data/" + storage.text);
  if (record == records_.end()) {
    return absl::DataLossError(absl::StrCat("checkpoint: no record data/", storage.text));
  }
  const int64_t element = static_cast<int64_t>(c10::elementSize(storage.dtype));
  const int64_t elements = static_cast<int64_t>(record->second.size()) / element;
  std::vector<int64_t> sizes, strides;
  int64_t last = args[1]->number;  // the largest element index the view reads
  bool empty = false;
  for (size_t d = 0; d < args[2]->items.size(); ++d) {
    sizes.push_back(args[2]->items[d]->number);
    strides.push_back(args[3]->items[d]->number);
    empty |= sizes.back() == 0;
    if (sizes.back() > (int64_t{1} << 40) || strides.back() > (int64_t{1} << 40)) {
      return Invalid("tensor of storage ", storage.text, " is too large");
    }
    int64_t reach = 0;
    if (sizes.back() > 0 && (__builtin_mul_overflow(sizes.back() - 1, strides.back(), &reach) ||
                             __builtin_add_overflow(last, reach, &last))) {
      return Invalid("tensor of storage ", storage.text, " is too large");
    }
  }
  if (!empty && last >= elements) {
    return Invalid("a tensor reaches past the end of storage ", storage.text, " (", elements,
                   " elements)");
  }
  auto v = Make(Value::Kind::kTensor);
  auto flat = torch::from_blob(const_cast<char*>(record->second.data()), {elements},
                               torch::TensorOptions().dtype(storage.dtype));
  v->tensor = empty ? torch::zeros(sizes, torch::kFloat)
                    : flat.as_strided(sizes, strides, args[1]->number).to(torch::kFloat).clone();
  return v;
}

}  // namespace

absl::StatusOr<TensorMap> ReadTorchCheckpointBytes(absl::string_view archive) {
  absl::StatusOr<std::map<std::string, absl::string_view>> records = StoredZipEntries(archive);
  if (!records.ok()) return records.status();
  std::string prefix;
  for (const auto& [name, data] : *records) {
    if (absl::EndsWith(name, "/data.pkl") && name.find('/') == name.size() - 9) {
      prefix = name.substr(0, name.size() - 8);
    }
  }
  if (prefix.empty()) {
    return absl::InvalidArgumentError(
        "no ARCHIVE/data.pkl record: not a checkpoint written by torch.save");
  }
  return ReadStateDictPickle(records->at(prefix + "data.pkl"), *records, prefix);
}

absl::StatusOr<TensorMap> ReadStateDictPickle(
    absl::string_view pickle, const std::map<std::string, absl::string_view>& records,
    const std::string& prefix) {
  Unpickler unpickler(pickle, records, prefix);
  absl::StatusOr<ValuePtr> root = unpickler.Run();
  if (!root.ok()) return root.status();
  if ((*root)->kind != Value::Kind::kDict)
    return Invalid("the checkpoint is not a dict of tensors");
  TensorMap tensors;
  const auto& items = (*root)->items;
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i]->kind != Value::Kind::kString) return Invalid("a key that is not a string");
    if (items[i + 1]->kind != Value::Kind::kTensor) {
      return Invalid("\"", items[i]->text, "\" is not a tensor");
    }
    tensors[items[i]->text] = items[i + 1]->tensor;
  }
  return tensors;
}

absl::StatusOr<TensorMap> ReadTorchCheckpoint(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpointBytes(*bytes);
  if (!tensors.ok()) {
    return absl::Status(tensors.status().code(),
                        absl::StrCat(path, ": ", tensors.status().message()));
  }
  return tensors;
}

}  // namespace attn
