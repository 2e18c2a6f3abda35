// LoadPackage on mutated archives: the bytes of a model package file,
// through the zip integrity check (util/zip_integrity.h: the end records,
// the central directory, local headers, stored and deflated entries and
// their CRC-32s), then, for what passes it, LibTorch's reader and the
// project's own checks: the version range, the config, the parameter budget
// a config may claim, and the tensors' names and shapes both ways.
//
// A load must end in kDataLoss (not an intact archive) or kInvalidArgument
// (an archive that is not a model), with a message that names the file; a
// model that loads must run a forward pass with logits of the right shape.
//
// Seeds (tests/fuzz/corpus/model_package): four 48 KB packages, one per
// bundled mixer kind, written by
//   attn-train --corpus=C --output=KIND.pt --mixer=KIND --d_model=8 --layers=1
//     --heads=2 --ff_hidden=8 --window=4 --max_context=32 --vocab_size=280
//     --seq_len=16 --batch=2 --steps=1 --warmup=1
// on a corpus of a few hundred lines of random lowercase words, and one
// int8 package (format 3) made from one of them by
//   attn-export --input=aft-decay.pt --output=aft-decay-int8.pt --quantize=int8
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <new>
#include <string>

#include "model/lm/model_package.h"
#include "tests/fuzz/scratch_file.h"

// LibTorch's unpickler reserves whatever length a corrupt record claims. In
// the server that either succeeds (untouched pages; the short read then
// fails) or throws std::bad_alloc, and LoadPackage turns both into a
// refusal. ASan's operator new aborts on a failed allocation instead of
// throwing, so this target replaces it (ASan's are weak) with the standard
// behaviour on top of ASan's nothrow new: with allocator_may_return_null=1
// and max_allocation_size_mb (scripts/fuzz.sh), a request past the cap
// throws as it would in production, and ASan still tracks every block.
void* operator new(size_t size) {
  if (void* block = ::operator new(size, std::nothrow)) return block;
  throw std::bad_alloc();
}

void* operator new[](size_t size) {
  if (void* block = ::operator new[](size, std::nothrow)) return block;
  throw std::bad_alloc();
}

namespace {

const std::string& ScratchPath() {
  static const std::string path = attn::fuzzing::ScratchPath("fuzz_model_package");
  return path;
}

bool WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return false;
  const bool written = std::fwrite(data, 1, size, file) == size;
  return std::fclose(file) == 0 && written;
}

void CheckRuns(attn::CausalLm& model) {
  const int64_t vocab = model->config().vocab_size;
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::tensor({{int64_t{0}, vocab - 1}}, torch::kLong);
  const torch::Tensor logits = model->forward(tokens);
  if (logits.dim() != 3 || logits.size(0) != 1 || logits.size(1) != 2 || logits.size(2) != vocab) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath();
  if (!WriteFile(path, data, size)) return 0;  // a full disk is not a finding
  absl::StatusOr<attn::ModelPackage> package = attn::LoadPackage(path);
  std::remove(path.c_str());
  if (package.ok()) {
    CheckRuns(package->model);
    return 0;
  }
  const absl::StatusCode code = package.status().code();
  if (code != absl::StatusCode::kDataLoss && code != absl::StatusCode::kInvalidArgument) {
    __builtin_trap();
  }
  if (package.status().message().find(path) == std::string::npos) __builtin_trap();
  return 0;
}
