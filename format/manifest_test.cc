// manifest.json: what ManifestToJson writes comes back whole, and every field a reader relies
// on is checked for presence, type and range. Hostile sizes are in hostile_test.cc.
#include "format/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "format/format.h"
#include "format/testing.h"

namespace fanstore::format {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::WriteFile;

Manifest Full() {
  Manifest m = testing::TestManifest(0x0123456789abcdefull);
  m.files = 44;
  m.dirs = 3;
  m.symlinks = 1;
  m.raw_bytes = 123456789012ull;
  m.stored_bytes = 98765;
  m.root_mode = 01750;
  m.root_mtime_ns = -1500000000123456789ll;  // before 1970: mtimes may be negative
  m.codec = "zstd";
  m.level = 19;
  m.dict = {"dict.zstd", 4096, 0xfedcba9876543210ull, 0xffffffffu};
  m.shards.push_back({"shard-00000.fsd", 1000, 40, 0x1111111111111111ull});
  m.shards.push_back({"shard-00001.fsd", 2000, 4, 0xffffffffffffffffull});
  return m;
}

// The error of parsing Full() after `edit`; "" when it parsed.
std::string ErrorAfter(const std::function<void(json&)>& edit) {
  json j = json::parse(ManifestToJson(Full()));
  edit(j);
  auto m = ManifestFromJson(j.dump());
  return m.ok() ? "" : m.status().message();
}

TEST(Manifest, EveryFieldRoundTrips) {
  const Manifest in = Full();
  auto out = ManifestFromJson(ManifestToJson(in));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->version, kVersion);
  EXPECT_EQ(out->tool_version, "test");
  EXPECT_EQ(out->created, in.created);
  EXPECT_EQ(out->dataset_id, in.dataset_id);
  EXPECT_EQ(out->files, 44u);
  EXPECT_EQ(out->dirs, 3u);
  EXPECT_EQ(out->symlinks, 1u);
  EXPECT_EQ(out->raw_bytes, in.raw_bytes);
  EXPECT_EQ(out->stored_bytes, in.stored_bytes);
  EXPECT_EQ(out->root_mode, 01750u);
  EXPECT_EQ(out->root_mtime_ns, in.root_mtime_ns);
  EXPECT_EQ(out->codec, "zstd");
  EXPECT_EQ(out->level, 19);
  EXPECT_EQ(out->dict.file, "dict.zstd");
  EXPECT_EQ(out->dict.bytes, 4096u);
  EXPECT_EQ(out->dict.xxh3, in.dict.xxh3);
  EXPECT_EQ(out->dict.id, 0xffffffffu);
  ASSERT_EQ(out->shards.size(), 2u);
  for (size_t i = 0; i < 2; i++) {
    EXPECT_EQ(out->shards[i].file, in.shards[i].file);
    EXPECT_EQ(out->shards[i].bytes, in.shards[i].bytes);
    EXPECT_EQ(out->shards[i].files, in.shards[i].files);
    EXPECT_EQ(out->shards[i].xxh3, in.shards[i].xxh3);
  }
}

TEST(Manifest, NoDictionaryIsNullAndReadsAsEmpty) {
  Manifest in = Full();
  in.dict = {};
  const std::string text = ManifestToJson(in);
  EXPECT_TRUE(json::parse(text)["dict"].is_null());
  auto out = ManifestFromJson(text);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->dict.file.empty());
  EXPECT_EQ(ErrorAfter([](json& j) { j.erase("dict"); }), "");  // absent is the same
}

TEST(Manifest, AnAbsentRootKeepsTheDefaults) {
  json j = json::parse(ManifestToJson(Full()));
  j.erase("root");
  auto out = ManifestFromJson(j.dump());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->root_mode, 0755u);
  EXPECT_EQ(out->root_mtime_ns, 0);
}

TEST(Manifest, EveryRequiredFieldMustBePresent) {
  for (const char* key :
       {"format", "version", "tool_version", "created", "dataset_id", "files", "dirs", "symlinks",
        "raw_bytes", "stored_bytes", "codec", "level", "shards"}) {
    const std::string err = ErrorAfter([&](json& j) { j.erase(key); });
    EXPECT_NE(err, "") << key;
  }
  EXPECT_NE(ErrorAfter([](json& j) { j.erase("version"); }).find("version"), std::string::npos);
  EXPECT_NE(ErrorAfter([](json& j) { j.erase("shards"); }).find("shards"), std::string::npos);
}

TEST(Manifest, MistypedFieldsAreRefused) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"format", "tarball"},
      {"format", 1},
      {"version", "1"},
      {"version", 4},  // newer than this tool
      {"version", 0},
      {"version", -1},
      {"tool_version", 1},
      {"created", nullptr},
      {"files", "44"},
      {"files", -1},
      {"files", 1.5},
      {"dirs", true},
      {"raw_bytes", json::array()},
      {"codec", 3},
      {"level", 23},
      {"level", -1},
      {"dataset_id", 42},
      {"dataset_id", "0123456789abcde"},    // 15 digits
      {"dataset_id", "0123456789abcdef0"},  // 17
      {"dataset_id", "0123456789ABCDEF"},   // the writer's lowercase only
      {"dataset_id", "0123456789abcdeg"},
      {"root", 0755},
      {"root", {{"mode", 010000}, {"mtime_ns", 0}}},
      {"root", {{"mode", "0755"}, {"mtime_ns", 0}}},
      {"root", {{"mode", 0755}}},
      {"root", {{"mode", 0755}, {"mtime_ns", 1.5}}},
      {"dict", "dict.zstd"},
      {"dict",
       {{"file", "dict.zstd"}, {"bytes", 1}, {"xxh3", "0000000000000000"}, {"id", 4294967296ull}}},
      {"dict", {{"file", "../dict"}, {"bytes", 1}, {"xxh3", "0000000000000000"}, {"id", 1}}},
      {"dict", {{"file", "dict.zstd"}, {"bytes", 1}, {"id", 1}}},
      {"shards", {{"file", "s"}}},
      {"shards", json::array()},
      {"shards", json::array({1})},
      {"shards", json::array({{{"file", "s"}, {"bytes", 1}, {"files", 0}}})},
      {"shards",
       json::array({{{"file", "s"}, {"bytes", "1"}, {"files", 0}, {"xxh3", "0000000000000000"}}})},
  };
  for (const auto& [key, value] : cases) {
    const std::string err = ErrorAfter([&](json& j) { j[key] = value; });
    EXPECT_NE(err, "") << key << " = " << value.dump();
  }
  EXPECT_NE(ErrorAfter([](json& j) { j["format"] = "tarball"; }).find("not a FanStore manifest"),
            std::string::npos);
  EXPECT_NE(ErrorAfter([](json& j) { j["shards"] = json::array(); }).find("no shards"),
            std::string::npos);
}

TEST(Manifest, ShardNamesArePlainFileNames) {
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "a/b", "/etc/passwd", "../x", std::string("a\0b", 3),
                                std::string(kMaxName + 1, 'n')}) {
    const std::string err = ErrorAfter([&](json& j) { j["shards"][1]["file"] = bad; });
    EXPECT_NE(err, "") << "'" << bad << "'";
  }
  EXPECT_NE(ErrorAfter([](json& j) { j["shards"][1]["file"] = "a/b"; }).find("unsafe"),
            std::string::npos);
  EXPECT_EQ(ErrorAfter([](json& j) { j["shards"][1]["file"] = std::string(kMaxName, 'n'); }), "");
}

TEST(Manifest, NotAnObjectOrNotJsonIsCorruption) {
  for (const char* text :
       {"", "[]", "42", "\"fanstore\"", "null", "{", "{\"format\":\"fanstore\",}", "{} trailing"}) {
    auto m = ManifestFromJson(text);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_TRUE(m.status().IsCorruption()) << text;
  }
  auto m = ManifestFromJson("[1, 2");
  EXPECT_NE(m.status().message().find("not valid JSON"), std::string::npos)
      << m.status().ToString();
}

TEST(Manifest, NestingDeeperThanTheFormatIsRefusedBeforeParsing) {
  const std::string base = ManifestToJson(Full());
  // An extra field four objects deep: the format never goes deeper than shards[{...}].
  auto m = ManifestFromJson("{\"x\":{\"y\":{\"z\":{\"w\":{}}}}," + base.substr(1));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("nested deeper"), std::string::npos) << m.status().ToString();
  // Unknown fields at a sane depth are ignored (forward compatible).
  EXPECT_EQ(ErrorAfter([](json& j) { j["future"] = {{"a", 1}}; }), "");
}

TEST(LoadManifest, ErrorsNameTheDatasetAndTheFile) {
  TempDir t;
  auto missing = LoadManifest(t.path() + "/none.fs");
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);

  WriteFile(t.path() + "/file", "x");
  auto file = LoadManifest(t.path() + "/file");
  EXPECT_EQ(file.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(file.status().message().find("not a directory"), std::string::npos);

  const std::string ds = t.path() + "/ds.fs";
  ASSERT_EQ(::mkdir(ds.c_str(), 0755), 0);
  auto empty = LoadManifest(ds);
  EXPECT_TRUE(empty.status().IsNotFound());
  EXPECT_NE(empty.status().message().find("no manifest.json"), std::string::npos)
      << empty.status().ToString();

  WriteFile(ds + "/manifest.json", "{\"format\":\"fanstore\"}");
  auto bad = LoadManifest(ds);
  EXPECT_TRUE(bad.status().IsCorruption());
  EXPECT_EQ(bad.status().message().rfind(ds + "/manifest.json: ", 0), 0u)
      << bad.status().ToString();

  WriteFile(ds + "/manifest.json", ManifestToJson(Full()));
  auto good = LoadManifest(ds);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->shards.size(), 2u);
}

}  // namespace
}  // namespace fanstore::format
