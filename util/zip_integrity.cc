#include "util/zip_integrity.h"

#include <zlib.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "util/files.h"

namespace attn {
namespace {

// Record signatures and fixed sizes (PKWARE APPNOTE 4.3).
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralEntrySignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralEntrySize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kZip64EndSize = 56;
constexpr uint64_t kMaxCommentSize = 0xffff;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("not an intact zip archive (", what,
                                          "); the file is truncated or damaged: copy "
                                          "or export it again"));
}

// Little-endian reads at offsets the caller has bounds-checked.
class Bytes {
 public:
  explicit Bytes(absl::string_view data) : data_(data) {}
  uint64_t size() const { return data_.size(); }
  bool Has(uint64_t offset, uint64_t count) const {
    return offset <= data_.size() && count <= data_.size() - offset;
  }
  uint16_t U16(uint64_t at) const { return static_cast<uint16_t>(Byte(at) | Byte(at + 1) << 8); }
  uint32_t U32(uint64_t at) const { return U16(at) | static_cast<uint32_t>(U16(at + 2)) << 16; }
  uint64_t U64(uint64_t at) const { return U32(at) | static_cast<uint64_t>(U32(at + 4)) << 32; }
  absl::string_view View(uint64_t at, uint64_t count) const { return data_.substr(at, count); }

 private:
  uint32_t Byte(uint64_t at) const { return static_cast<unsigned char>(data_[at]); }
  absl::string_view data_;
};

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct Entry {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t uncompressed = 0;
  uint64_t local_header = 0;
};

// The end-of-central-directory record: the last signature match whose
// comment reaches exactly the end of the file.
absl::StatusOr<uint64_t> FindEnd(const Bytes& bytes) {
  if (bytes.size() < kEndSize) return Corrupt("shorter than an end record");
  const uint64_t earliest =
      bytes.size() > kEndSize + kMaxCommentSize ? bytes.size() - kEndSize - kMaxCommentSize : 0;
  for (uint64_t at = bytes.size() - kEndSize + 1; at-- > earliest;) {
    if (bytes.U32(at) == kEndSignature && at + kEndSize + bytes.U16(at + 20) == bytes.size()) {
      return at;
    }
  }
  return Corrupt("no end-of-central-directory record");
}

absl::StatusOr<Directory> ReadDirectory(const Bytes& bytes) {
  absl::StatusOr<uint64_t> end = FindEnd(bytes);
  if (!end.ok()) return end.status();
  Directory dir{bytes.U16(*end + 10), bytes.U32(*end + 16), bytes.U32(*end + 12)};
  const bool zip64 = dir.entries == 0xffff || dir.offset == 0xffffffff || dir.size == 0xffffffff;
  if (zip64) {
    if (*end < kZip64LocatorSize || bytes.U32(*end - kZip64LocatorSize) != kZip64LocatorSignature) {
      return Corrupt("no zip64 end locator");
    }
    const uint64_t record = bytes.U64(*end - kZip64LocatorSize + 8);
    if (!bytes.Has(record, kZip64EndSize) || bytes.U32(record) != kZip64EndSignature) {
      return Corrupt("no zip64 end record");
    }
    dir = {bytes.U64(record + 32), bytes.U64(record + 48), bytes.U64(record + 40)};
  }
  if (!bytes.Has(dir.offset, dir.size)) return Corrupt("central directory outside the file");
  if (dir.entries == 0) return Corrupt("no entries");
  return dir;
}

// Replaces the 32-bit sizes and offset saturated to 0xffffffff by the zip64
// extra field's 64-bit values, in the order the format lists them.
absl::Status ApplyZip64Extra(absl::string_view extra, Entry& entry) {
  const Bytes bytes(extra);
  for (uint64_t at = 0; bytes.Has(at, 4);) {
    const uint16_t id = bytes.U16(at);
    const uint16_t length = bytes.U16(at + 2);
    if (!bytes.Has(at + 4, length)) return Corrupt(absl::StrCat(entry.name, ": extra field"));
    if (id == kZip64ExtraId) {
      uint64_t field = at + 4;
      for (uint64_t* value : {&entry.uncompressed, &entry.compressed, &entry.local_header}) {
        if (*value != 0xffffffff) continue;
        if (field + 8 > at + 4 + length) return Corrupt(absl::StrCat(entry.name, ": zip64 field"));
        *value = bytes.U64(field);
        field += 8;
      }
    }
    at += 4 + length;
  }
  return absl::OkStatus();
}

absl::StatusOr<Entry> ReadEntry(const Bytes& bytes, uint64_t& at, uint64_t directory_end) {
  if (at + kCentralEntrySize > directory_end || bytes.U32(at) != kCentralEntrySignature) {
    return Corrupt("central directory entry");
  }
  const uint64_t name_length = bytes.U16(at + 28);
  const uint64_t extra_length = bytes.U16(at + 30);
  const uint64_t comment_length = bytes.U16(at + 32);
  const uint64_t next = at + kCentralEntrySize + name_length + extra_length + comment_length;
  if (next > directory_end) return Corrupt("central directory entry runs past the directory");
  Entry entry;
  entry.name = std::string(bytes.View(at + kCentralEntrySize, name_length));
  entry.method = bytes.U16(at + 10);
  entry.crc = bytes.U32(at + 16);
  entry.compressed = bytes.U32(at + 20);
  entry.uncompressed = bytes.U32(at + 24);
  entry.local_header = bytes.U32(at + 42);
  if (auto status =
          ApplyZip64Extra(bytes.View(at + kCentralEntrySize + name_length, extra_length), entry);
      !status.ok()) {
    return status;
  }
  at = next;
  return entry;
}

// The entry's data, located through its local header.
absl::StatusOr<absl::string_view> EntryData(const Bytes& bytes, const Entry& entry) {
  const uint64_t header = entry.local_header;
  if (!bytes.Has(header, kLocalHeaderSize) || bytes.U32(header) != kLocalHeaderSignature) {
    return Corrupt(absl::StrCat(entry.name, ": local header"));
  }
  const uint64_t start =
      header + kLocalHeaderSize + bytes.U16(header + 26) + bytes.U16(header + 28);
  if (!bytes.Has(start, entry.compressed)) {
    return Corrupt(absl::StrCat(entry.name, ": data runs past the end of the file"));
  }
  return bytes.View(start, entry.compressed);
}

// CRC-32 of the inflated data, inflating in bounded chunks; fails when the
// stream is malformed or does not end at exactly `entry.uncompressed` bytes.
absl::StatusOr<uint32_t> InflatedCrc(absl::string_view data, const Entry& entry) {
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return absl::InternalError("inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  unsigned char chunk[1 << 16];
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t produced = 0;
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = chunk;
    stream.avail_out = sizeof(chunk);
    result = inflate(&stream, Z_NO_FLUSH);
    const uint64_t got = sizeof(chunk) - stream.avail_out;
    produced += got;
    if (produced > entry.uncompressed) break;
    crc = crc32(crc, chunk, static_cast<uInt>(got));
  }
  inflateEnd(&stream);
  if (result != Z_STREAM_END || produced != entry.uncompressed) {
    return Corrupt(absl::StrCat(entry.name, ": compressed data is damaged"));
  }
  return static_cast<uint32_t>(crc);
}

absl::Status CheckEntry(const Bytes& bytes, const Entry& entry) {
  absl::StatusOr<absl::string_view> data = EntryData(bytes, entry);
  if (!data.ok()) return data.status();
  uint32_t crc = 0;
  if (entry.method == kStored) {
    if (entry.compressed != entry.uncompressed) {
      return Corrupt(absl::StrCat(entry.name, ": stored sizes disagree"));
    }
    // zlib's crc32 takes at most 4 GB per call.
    uLong running = crc32(0L, Z_NULL, 0);
    for (uint64_t at = 0; at < data->size(); at += 1u << 30) {
      const absl::string_view piece = data->substr(at, 1u << 30);
      running = crc32(running, reinterpret_cast<const Bytef*>(piece.data()),
                      static_cast<uInt>(piece.size()));
    }
    crc = static_cast<uint32_t>(running);
  } else if (entry.method == kDeflated) {
    absl::StatusOr<uint32_t> inflated = InflatedCrc(*data, entry);
    if (!inflated.ok()) return inflated.status();
    crc = *inflated;
  } else {
    return Corrupt(absl::StrCat(entry.name, ": compression method ", entry.method));
  }
  if (crc != entry.crc) return Corrupt(absl::StrCat(entry.name, ": CRC-32 mismatch"));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckZipIntegrity(absl::string_view archive) {
  const Bytes bytes(archive);
  absl::StatusOr<Directory> dir = ReadDirectory(bytes);
  if (!dir.ok()) return dir.status();
  uint64_t at = dir->offset;
  const uint64_t directory_end = dir->offset + dir->size;
  for (uint64_t i = 0; i < dir->entries; ++i) {
    absl::StatusOr<Entry> entry = ReadEntry(bytes, at, directory_end);
    if (!entry.ok()) return entry.status();
    if (auto status = CheckEntry(bytes, *entry); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, absl::string_view>> StoredZipEntries(
    absl::string_view archive) {
  if (auto status = CheckZipIntegrity(archive); !status.ok()) return status;
  const Bytes bytes(archive);
  absl::StatusOr<Directory> dir = ReadDirectory(bytes);
  if (!dir.ok()) return dir.status();
  std::map<std::string, absl::string_view> entries;
  uint64_t at = dir->offset;
  for (uint64_t i = 0; i < dir->entries; ++i) {
    absl::StatusOr<Entry> entry = ReadEntry(bytes, at, dir->offset + dir->size);
    if (!entry.ok()) return entry.status();
    if (entry->method != kStored) {
      return absl::DataLossError(absl::StrCat(entry->name, " is compressed; expected stored data"));
    }
    absl::StatusOr<absl::string_view> data = EntryData(bytes, *entry);
    if (!data.ok()) return data.status();
    entries[entry->name] = *data;
  }
  return entries;
}

absl::StatusOr<std::string> ReadIntactZip(const std::string& path) {
  absl::StatusOr<std::string> archive = ReadFileBytes(path);
  if (!archive.ok()) return absl::DataLossError(archive.status().message());
  if (auto status = CheckZipIntegrity(*archive); !status.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", status.message()));
  }
  return archive;
}

}  // namespace attn
