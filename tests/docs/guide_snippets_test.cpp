// docs/guide.md cannot rot: each ```cpp block in it is a region of a compiled example
// (examples/guide/*.cpp, between `// [guide:NAME]` and `// [guide:end]`), named by the
// `<!-- snippet: FILE#NAME -->` line above the block, and must equal that region character for
// character (after removing the region's common indentation). Every region is shown somewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = GRADUS_SOURCE_DIR;

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The regions of one example file, by name, dedented and joined with '\n'.
std::map<std::string, std::string> regions_of(const fs::path& path) {
  std::map<std::string, std::string> out;
  const std::vector<std::string> lines = read_lines(path);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (t.rfind("// [guide:", 0) != 0 || t == "// [guide:end]") continue;
    const std::string name = t.substr(10, t.size() - 11);
    size_t end = i + 1;
    while (end < lines.size() && trim(lines[end]) != "// [guide:end]") ++end;
    EXPECT_LT(end, lines.size()) << path << ": region " << name << " has no // [guide:end]";
    size_t indent = std::string::npos;
    for (size_t k = i + 1; k < end; ++k) {
      if (!trim(lines[k]).empty()) indent = std::min(indent, lines[k].find_first_not_of(' '));
    }
    std::string text;
    for (size_t k = i + 1; k < end; ++k) {
      text += (lines[k].size() > indent ? lines[k].substr(indent) : std::string()) + "\n";
    }
    EXPECT_EQ(out.count(name), 0u) << path << ": region " << name << " appears twice";
    out[name] = text;
    i = end;
  }
  return out;
}

struct Block {
  size_t line;         // 1-based line of the ```cpp fence in guide.md
  std::string marker;  // FILE#NAME, empty when the block has none
  std::string text;
};

std::vector<Block> cpp_blocks(const std::vector<std::string>& lines) {
  std::vector<Block> blocks;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (trim(lines[i]) != "```cpp") continue;
    Block b{i + 1, "", ""};
    for (size_t k = i; k-- > 0;) {  // the nearest non-blank line above
      const std::string t = trim(lines[k]);
      if (t.empty()) continue;
      const std::string open = "<!-- snippet: ", close = " -->";
      if (t.rfind(open, 0) == 0 && t.size() > open.size() + close.size() &&
          t.compare(t.size() - close.size(), close.size(), close) == 0) {
        b.marker = t.substr(open.size(), t.size() - open.size() - close.size());
      }
      break;
    }
    size_t k = i + 1;
    for (; k < lines.size() && trim(lines[k]) != "```"; ++k) b.text += lines[k] + "\n";
    blocks.push_back(b);
    i = k;
  }
  return blocks;
}

TEST(GuideSnippets, EveryCppBlockIsACompiledRegion) {
  const std::vector<std::string> guide = read_lines(kRoot / "docs" / "guide.md");
  ASSERT_FALSE(guide.empty());
  std::map<std::string, std::map<std::string, std::string>> files;  // relative path -> regions
  for (const auto& entry : fs::directory_iterator(kRoot / "examples" / "guide")) {
    if (entry.path().extension() != ".cpp") continue;
    files[fs::relative(entry.path(), kRoot).generic_string()] = regions_of(entry.path());
  }
  ASSERT_FALSE(files.empty());
  std::set<std::string> shown;
  const std::vector<Block> blocks = cpp_blocks(guide);
  EXPECT_GE(blocks.size(), 6u);
  for (const Block& b : blocks) {
    ASSERT_FALSE(b.marker.empty()) << "docs/guide.md:" << b.line
                                   << ": a ```cpp block without <!-- snippet: FILE#NAME --> above";
    const size_t hash = b.marker.find('#');
    ASSERT_NE(hash, std::string::npos) << "docs/guide.md:" << b.line << ": " << b.marker;
    const std::string file = b.marker.substr(0, hash), name = b.marker.substr(hash + 1);
    ASSERT_EQ(files.count(file), 1u) << "docs/guide.md:" << b.line << ": no example " << file;
    const auto& regions = files[file];
    ASSERT_EQ(regions.count(name), 1u)
        << "docs/guide.md:" << b.line << ": " << file << " has no region [guide:" << name << "]";
    EXPECT_EQ(b.text, regions.at(name))
        << "docs/guide.md:" << b.line << " differs from " << file << " [guide:" << name
        << "]: copy the region into the guide";
    shown.insert(b.marker);
  }
  for (const auto& [file, regions] : files) {
    for (const auto& [name, text] : regions) {
      EXPECT_EQ(shown.count(file + "#" + name), 1u)
          << file << " [guide:" << name << "] is not shown in docs/guide.md";
    }
  }
}

// The checker itself: a region is found, dedented and compared exactly; a changed line fails.
TEST(GuideSnippets, RegionsAreExtractedAndComparedExactly) {
  const fs::path dir = fs::temp_directory_path() / "gradus_guide_snippets_test";
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "x.cpp");
    f << "int main() {\n  // [guide:body]\n  int a = 1;\n\n    return a;\n  // [guide:end]\n}\n";
  }
  const auto regions = regions_of(dir / "x.cpp");
  ASSERT_EQ(regions.count("body"), 1u);
  EXPECT_EQ(regions.at("body"), "int a = 1;\n\n  return a;\n");
  const std::vector<Block> blocks =
      cpp_blocks({"text", "<!-- snippet: x.cpp#body -->", "```cpp", "int a = 1;", "", "  return a;",
                  "```", "```cpp", "unmarked", "```"});
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].marker, "x.cpp#body");
  EXPECT_EQ(blocks[0].text, regions.at("body"));
  EXPECT_TRUE(blocks[1].marker.empty());
  fs::remove_all(dir);
}

}  // namespace
