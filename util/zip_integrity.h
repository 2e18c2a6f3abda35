// Checks a zip archive's own integrity records before anything trusts its
// contents. Model packages and TorchScript models are zip archives, and
// LibTorch's reader skips the CRC-32 every entry carries: a flipped bit in a
// tensor record loads as a silently different weight, and a damaged code or
// debug record reaches LibTorch's TorchScript parser, which can crash the
// process on some corrupt inputs (tests/fuzz/model_package_fuzzer.cc found
// such inputs). Checking every entry's CRC first turns accidental corruption
// (a truncated copy, a damaged disk, a bad download) into a refusal that
// names the entry.
//
// What it reads: the end-of-central-directory record (zip64 too), every
// central directory entry, its local header, and its data, stored or
// deflated. A deflated entry is inflated in bounded chunks, never into one
// buffer of the size it claims. It is an integrity check, not a defence
// against a crafted archive: one with correct CRCs passes.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attn {

// OK when `archive` is a well-formed zip whose every entry matches its
// CRC-32 and sizes. Otherwise kDataLoss, saying which entry or record is
// wrong (the caller adds the file's name).
absl::Status CheckZipIntegrity(absl::string_view archive);

// The data of every entry of an intact archive (CheckZipIntegrity), by name,
// as views into `archive`. Entries must be stored, not deflated (as
// torch.save writes them): kDataLoss naming a deflated one.
absl::StatusOr<std::map<std::string, absl::string_view>> StoredZipEntries(
    absl::string_view archive);

// The bytes of the file at `path`, once CheckZipIntegrity passed on them:
// what a loader hands to LibTorch (from memory, so the bytes checked are the
// bytes read; loaders hand them over through caffe2::serialize::MemoryReadAdapter,
// without another copy). kDataLoss
// for an unreadable or corrupt file; messages start with `path`.
absl::StatusOr<std::string> ReadIntactZip(const std::string& path);

}  // namespace attn
