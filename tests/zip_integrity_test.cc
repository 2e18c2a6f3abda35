#include "util/zip_integrity.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "util/files.h"

namespace attn {
namespace {

// Writes zip archives by hand, as the format describes them (PKWARE
// APPNOTE), so that the checker is tested against the format and not
// against LibTorch's writer (model_package_test covers real packages).
class ZipBuilder {
 public:
  void Stored(const std::string& name, const std::string& data) {
    entries_.push_back({name, data, data, 0});
  }
  void Deflated(const std::string& name, const std::string& data) {
    entries_.push_back({name, data, Deflate(data), 8});
  }

  // With `zip64`, the classic end record holds only the "see zip64"
  // sentinels and the real counts live in the zip64 end record.
  std::string Build(bool zip64 = false) const {
    std::string out;
    std::vector<uint32_t> offsets;
    for (const auto& e : entries_) {
      offsets.push_back(static_cast<uint32_t>(out.size()));
      Put32(out, 0x04034b50);
      Put16(out, 20), Put16(out, 0), Put16(out, e.method), Put16(out, 0), Put16(out, 0);
      Put32(out, Crc(e.plain)), Put32(out, e.stored.size()), Put32(out, e.plain.size());
      Put16(out, e.name.size()), Put16(out, 0);
      out += e.name + e.stored;
    }
    const uint64_t directory = out.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const auto& e = entries_[i];
      Put32(out, 0x02014b50);
      Put16(out, 20), Put16(out, 20), Put16(out, 0), Put16(out, e.method), Put16(out, 0);
      Put16(out, 0), Put32(out, Crc(e.plain)), Put32(out, e.stored.size());
      Put32(out, e.plain.size()), Put16(out, e.name.size()), Put16(out, 0), Put16(out, 0);
      Put16(out, 0), Put16(out, 0), Put32(out, 0), Put32(out, offsets[i]);
      out += e.name;
    }
    const uint64_t directory_size = out.size() - directory;
    if (zip64) {
      const uint64_t record = out.size();
      Put32(out, 0x06064b50), Put64(out, 44), Put16(out, 45), Put16(out, 45);
      Put32(out, 0), Put32(out, 0), Put64(out, entries_.size()), Put64(out, entries_.size());
      Put64(out, directory_size), Put64(out, directory);
      Put32(out, 0x07064b50), Put32(out, 0), Put64(out, record), Put32(out, 1);
    }
    Put32(out, 0x06054b50), Put16(out, 0), Put16(out, 0);
    Put16(out, zip64 ? 0xffff : entries_.size()), Put16(out, zip64 ? 0xffff : entries_.size());
    Put32(out, zip64 ? 0xffffffff : directory_size), Put32(out, zip64 ? 0xffffffff : directory);
    Put16(out, 0);
    return out;
  }

 private:
  struct Entry {
    std::string name, plain, stored;
    uint16_t method;
  };
  static void Put16(std::string& out, uint64_t v) {
    for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  static void Put32(std::string& out, uint64_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  static void Put64(std::string& out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  static uint32_t Crc(const std::string& s) {
    return crc32(0L, reinterpret_cast<const Bytef*>(s.data()), s.size());
  }
  static std::string Deflate(const std::string& data) {
    z_stream z{};
    EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&z, data.size()), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    z.avail_in = data.size();
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = out.size();
    EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  }
  std::vector<Entry> entries_;
};

std::string Text(int repeats) {
  std::string text;
  for (int i = 0; i < repeats; ++i)
    text += "def forward(self, x): return x * " + std::to_string(i) + "\n";
  return text;
}

ZipBuilder Package() {
  ZipBuilder zip;
  zip.Stored("pkg/data/0", std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  zip.Deflated("pkg/code/model.py", Text(200));
  zip.Stored("pkg/version", "3\n");
  return zip;
}

void ExpectRefused(const std::string& archive, const std::string& words) {
  const absl::Status status = CheckZipIntegrity(archive);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(std::string(status.message()).find(words), std::string::npos) << status;
}

TEST(ZipIntegrity, IntactArchivesPass) {
  EXPECT_TRUE(CheckZipIntegrity(Package().Build()).ok()) << CheckZipIntegrity(Package().Build());
  EXPECT_TRUE(CheckZipIntegrity(Package().Build(/*zip64=*/true)).ok());
}

TEST(ZipIntegrity, AChangedStoredByteIsNamed) {
  std::string archive = Package().Build();
  archive[30 + std::string("pkg/data/0").size() + 3] ^= 0x10;  // inside the first entry's data
  ExpectRefused(archive, "pkg/data/0: CRC-32 mismatch");
}

TEST(ZipIntegrity, DamagedCompressedDataIsNamed) {
  const std::string good = Package().Build();
  const size_t start = good.find("pkg/code/model.py") + std::string("pkg/code/model.py").size();
  int refused = 0;
  for (size_t at = start; at < start + 40; ++at) {  // any byte of the deflate stream
    std::string archive = good;
    archive[at] ^= 0x5a;
    const absl::Status status = CheckZipIntegrity(archive);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << at;
    EXPECT_NE(std::string(status.message()).find("pkg/code/model.py"), std::string::npos) << status;
    refused += !status.ok();
  }
  EXPECT_EQ(refused, 40);
}

TEST(ZipIntegrity, EveryTruncationIsRefused) {
  for (bool zip64 : {false, true}) {
    const std::string archive = Package().Build(zip64);
    for (size_t length = 0; length < archive.size(); ++length) {
      const absl::Status status = CheckZipIntegrity(archive.substr(0, length));
      ASSERT_EQ(status.code(), absl::StatusCode::kDataLoss) << length << " " << status;
    }
  }
}

TEST(ZipIntegrity, RecordsThatPointOutsideTheFileAreRefused) {
  const std::string good = Package().Build();
  const size_t end = good.size() - 22;
  std::string far_directory = good;
  far_directory[end + 19] = '\x7f';  // directory offset's top byte
  ExpectRefused(far_directory, "central directory outside the file");

  std::string no_end = good;
  no_end[end] = 'X';
  ExpectRefused(no_end, "no end-of-central-directory record");

  std::string unknown_method = good;
  const size_t central = good.find(std::string("PK\x01\x02", 4));
  unknown_method[central + 10] = 12;  // bzip2, which the packages never use
  ExpectRefused(unknown_method, "pkg/data/0: compression method 12");

  std::string bad_local = good;
  bad_local[0] = 'Q';
  ExpectRefused(bad_local, "pkg/data/0: local header");
}

TEST(ZipIntegrity, ADeflatedEntryLongerThanItClaimsIsRefused) {
  std::string archive = Package().Build();
  const size_t central = archive.find(std::string("PK\x01\x02", 4));
  const size_t second = archive.find(std::string("PK\x01\x02", 4), central + 4);
  archive[second + 24] = 10;  // uncompressed size: 10 bytes of 200 lines
  archive[second + 25] = archive[second + 26] = archive[second + 27] = 0;
  ExpectRefused(archive, "pkg/code/model.py: compressed data is damaged");
}

TEST(ZipIntegrity, ReadIntactZipNamesAnUnreadableFile) {
  auto read = ReadIntactZip("/nonexistent/model.pt");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(read.status().message()).find("/nonexistent/model.pt"), std::string::npos);
}

// ReadFileBytes reads a file in one buffer of its size, an empty file as
// empty, a pipe (which has no size) as a stream, and names what it cannot.
TEST(ReadFileBytes, ReadsFilesEmptyFilesAndPipes) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/read_file_bytes_test.bin";
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(ReadFileBytes(path).value(), bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc).flush();
  EXPECT_EQ(ReadFileBytes(path).value(), "");
  std::remove(path.c_str());

  const std::string fifo = dir + "/read_file_bytes_test.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << bytes; });
  EXPECT_EQ(ReadFileBytes(fifo).value(), bytes);
  writer.join();
  std::remove(fifo.c_str());

  absl::StatusOr<std::string> missing = ReadFileBytes(dir + "/absent", "--text_file=");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "--text_file=" + dir + "/absent: cannot read it");
}

}  // namespace
}  // namespace attn
