#include "util/flags.h"

#include <gtest/gtest.h>

namespace attn {
namespace {

TEST(FlagsHelp, FolderIgnoresHowTheBuildSpelledThePath) {
  EXPECT_EQ(SourceFolder("/work/x/server/main.cc"), "work/x/server/");
  EXPECT_EQ(SourceFolder("work/x/server/main.cc"), "work/x/server/");  // as Abseil records it
  EXPECT_EQ(SourceFolder("../server/main.cc"), "server/");             // under a ccache base dir
  EXPECT_EQ(SourceFolder("./../server/engine.cc"), "server/");
  EXPECT_EQ(SourceFolder("main.cc"), "");
}

TEST(FlagsHelp, FoldersMatchOnlyAtAFolderBoundary) {
  // An absolute __FILE__ against Abseil's record of it: the build without a
  // ccache base directory, whose --help once listed no flag.
  EXPECT_TRUE(SameFolderTail(SourceFolder("/work/x/server/main.cc"),
                             SourceFolder("work/x/server/main.cc")));
  EXPECT_TRUE(SameFolderTail(SourceFolder("../server/main.cc"), SourceFolder("../server/x.cc")));
  EXPECT_TRUE(SameFolderTail("work/x/server/", "server/"));
  EXPECT_FALSE(SameFolderTail("work/x/myserver/", "server/"));
  EXPECT_FALSE(SameFolderTail(SourceFolder("absl/flags/parse.cc"), "server/"));
  EXPECT_FALSE(SameFolderTail("server/", ""));
}

}  // namespace
}  // namespace attn
