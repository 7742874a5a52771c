// manifest.json encoding and strict, exception-free decoding.
#include "format/manifest.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "common/hash.h"
#include "common/io.h"
#include "common/xattrs.h"
#include "format/format.h"

namespace fanstore::format {
namespace {

using nlohmann::json;

bool IsPlainName(const std::string& s) {
  return !s.empty() && s.size() <= kMaxName && s.find('/') == std::string::npos && s != "." &&
         s != ".." && s.find('\0') == std::string::npos;
}

bool GetU64(const json& j, const char* key, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}
std::string ToHex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// A lowercase hex digit's value, or -1.
int HexDigit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool FromHex(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0 || hex.size() > 2 * xattrs::kMaxEncoded) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigit(hex[i]), lo = HexDigit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

bool GetStr(const json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}
bool GetHex(const json& j, const char* key, uint64_t* out) {
  std::string s;
  if (!GetStr(j, key, &s) || s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    const int d = HexDigit(c);
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// Counts a document's values and nesting without building it: a hostile manifest (a 100 MB
// array of zeros, or 100,000 nested brackets) is refused before the DOM costs ten times its
// size, or the recursion of its destruction the stack.
class ShapeCheck : public nlohmann::json_sax<json> {
 public:
  explicit ShapeCheck(uint64_t max_values) : max_values_(max_values) {}
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    syntax_ = true;
    return false;
  }
  // Empty when the shape is acceptable, else why not.
  std::string Problem() const {
    if (syntax_) return "not valid JSON";
    if (depth_exceeded_) return "nested deeper than " + std::to_string(kMaxDepth) + " levels";
    if (values_ > max_values_) return "more than " + std::to_string(max_values_) + " values";
    return "";
  }

 private:
  static constexpr int kMaxDepth = 4;  // manifest { shards [ { ... } ] }, dict and root { }
  bool Value() { return ++values_ <= max_values_; }
  bool Open() {
    if (++depth_ > kMaxDepth) depth_exceeded_ = true;
    return !depth_exceeded_ && Value();
  }
  bool Close() {
    depth_--;
    return true;
  }
  uint64_t max_values_;
  uint64_t values_ = 0;
  int depth_ = 0;
  bool depth_exceeded_ = false;
  bool syntax_ = false;
};

// The top directory's attributes ("root"): mode and mtime always; ctime, size and extended
// attributes since version 3.
Status RootFromJson(const json& root, Manifest* m) {
  uint64_t mode = 0;
  auto mt = root.is_object() ? root.find("mtime_ns") : root.end();
  if (!root.is_object() || !GetU64(root, "mode", &mode) || mode > 07777 || mt == root.end() ||
      !mt->is_number_integer())
    return Status::Corruption("bad \"root\" entry");
  m->root_mode = static_cast<uint32_t>(mode);
  m->root_mtime_ns = mt->get<int64_t>();
  m->root_ctime_ns = m->root_mtime_ns;
  auto ct = root.find("ctime_ns");
  if (ct != root.end()) {
    if (!ct->is_number_integer()) return Status::Corruption("bad \"root\" ctime_ns");
    m->root_ctime_ns = ct->get<int64_t>();
  }
  if (root.contains("size") &&
      (!GetU64(root, "size", &m->root_size) || m->root_size > kMaxFileSize))
    return Status::Corruption("bad \"root\" size");
  std::string hex, why;
  if (root.contains("xattrs") && (!GetStr(root, "xattrs", &hex) || !FromHex(hex, &m->root_xattrs) ||
                                  !xattrs::Valid(m->root_xattrs, &why)))
    return Status::Corruption("bad \"root\" xattrs" + (why.empty() ? "" : ": " + why));
  return Status::OK();
}

Status DictFromJson(const json& d, DictRef* dict) {
  uint64_t id = 0;
  if (!d.is_object() || !GetStr(d, "file", &dict->file) || !IsPlainName(dict->file) ||
      !GetU64(d, "bytes", &dict->bytes) || !GetHex(d, "xxh3", &dict->xxh3) ||
      !GetU64(d, "id", &id) || id > 0xffffffffu || dict->bytes > kMaxDictBytes)
    return Status::Corruption("bad \"dict\" entry");
  dict->id = static_cast<uint32_t>(id);
  return Status::OK();
}

// The "shards" array: at least one, at most kMaxShards, each a plain file name.
Status ShardsFromJson(const json& s, std::vector<ShardRef>* shards) {
  if (s.size() > kMaxShards)
    return Status::Corruption("absurd shard count " + std::to_string(s.size()) + " (at most " +
                              std::to_string(kMaxShards) + ")");
  for (const auto& e : s) {
    ShardRef r;
    if (!e.is_object() || !GetStr(e, "file", &r.file) || !GetU64(e, "bytes", &r.bytes) ||
        !GetU64(e, "files", &r.files) || !GetHex(e, "xxh3", &r.xxh3))
      return Status::Corruption("bad shard entry " + std::to_string(shards->size()));
    if (!IsPlainName(r.file))
      return Status::Corruption("shard entry names an unsafe file '" + r.file.substr(0, 200) + "'");
    shards->push_back(std::move(r));
  }
  if (shards->empty()) return Status::Corruption("no shards");
  return Status::OK();
}

}  // namespace

std::string ManifestToJson(const Manifest& m) {
  json j;
  j["format"] = kFormatName;
  j["version"] = m.version;
  j["tool_version"] = m.tool_version;
  j["created"] = m.created;
  j["dataset_id"] = HashHex(m.dataset_id);
  j["files"] = m.files;
  j["dirs"] = m.dirs;
  j["symlinks"] = m.symlinks;
  j["raw_bytes"] = m.raw_bytes;
  j["stored_bytes"] = m.stored_bytes;
  j["root"] = {{"mode", m.root_mode},
               {"mtime_ns", m.root_mtime_ns},
               {"ctime_ns", m.root_ctime_ns},
               {"size", m.root_size}};
  if (!m.root_xattrs.empty()) j["root"]["xattrs"] = ToHex(m.root_xattrs);
  j["codec"] = m.codec;
  j["level"] = m.level;
  if (m.dict.file.empty()) {
    j["dict"] = nullptr;
  } else {
    j["dict"] = {{"file", m.dict.file},
                 {"bytes", m.dict.bytes},
                 {"xxh3", HashHex(m.dict.xxh3)},
                 {"id", m.dict.id}};
  }
  json shards = json::array();
  for (const auto& s : m.shards)
    shards.push_back(
        {{"file", s.file}, {"bytes", s.bytes}, {"files", s.files}, {"xxh3", HashHex(s.xxh3)}});
  j["shards"] = std::move(shards);
  return j.dump(1) + "\n";
}

Result<Manifest> ManifestFromJson(const std::string& text) {
  if (text.size() > kMaxManifestBytes)
    return Status::Corruption("manifest of " + std::to_string(text.size()) +
                              " bytes is larger than the " + std::to_string(kMaxManifestBytes) +
                              " a reader accepts");
  {
    // Six values per shard, a few dozen for the rest.
    ShapeCheck shape(kMaxShards * 6 + 64);
    const bool ok = json::sax_parse(text, &shape, json::input_format_t::json, /*strict=*/true);
    const std::string problem = shape.Problem();
    if (!ok || !problem.empty())
      return Status::Corruption(problem.empty() ? "not valid JSON" : problem);
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("not valid JSON");
  Manifest m;
  std::string fmt;
  if (!GetStr(j, "format", &fmt) || fmt != kFormatName)
    return Status::Corruption("not a FanStore manifest (\"format\" is not \"fanstore\")");
  uint64_t version = 0;
  if (!GetU64(j, "version", &version)) return Status::Corruption("missing \"version\"");
  if (!KnownVersion(version))
    return Status::Corruption("unsupported dataset version " + std::to_string(version) +
                              " (this tool reads versions " + std::to_string(kMinVersion) + " to " +
                              std::to_string(kVersion) + ")");
  m.version = static_cast<uint32_t>(version);
  uint64_t level = 0;
  if (!GetStr(j, "tool_version", &m.tool_version) || !GetStr(j, "created", &m.created) ||
      !GetHex(j, "dataset_id", &m.dataset_id) || !GetU64(j, "files", &m.files) ||
      !GetU64(j, "dirs", &m.dirs) || !GetU64(j, "symlinks", &m.symlinks) ||
      !GetU64(j, "raw_bytes", &m.raw_bytes) || !GetU64(j, "stored_bytes", &m.stored_bytes) ||
      !GetStr(j, "codec", &m.codec) || !GetU64(j, "level", &level) || level > 22)
    return Status::Corruption("missing or mistyped summary field");
  m.level = static_cast<int>(level);
  auto root = j.find("root");
  if (root != j.end()) FS_RETURN_IF_ERROR(RootFromJson(*root, &m));
  auto d = j.find("dict");
  if (d != j.end() && !d->is_null()) FS_RETURN_IF_ERROR(DictFromJson(*d, &m.dict));
  auto s = j.find("shards");
  if (s == j.end() || !s->is_array()) return Status::Corruption("missing \"shards\" array");
  FS_RETURN_IF_ERROR(ShardsFromJson(*s, &m.shards));
  return m;
}

Result<Manifest> LoadManifest(const std::string& dataset_dir) {
  struct stat st;
  if (::stat(dataset_dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("dataset " + dataset_dir + " does not exist");
    return Status::FromErrno("dataset " + dataset_dir, errno);
  }
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(dataset_dir + " is not a FanStore dataset (not a directory)");
  const std::string path = dataset_dir + "/" + kManifestName;
  auto text = ReadSmallFile(path, kMaxManifestBytes);
  if (!text.ok()) {
    if (text.status().IsNotFound())
      return Status::NotFound(dataset_dir + " is not a FanStore dataset (no " + kManifestName +
                              ")");
    return text.status();
  }
  auto m = ManifestFromJson(text.value());
  if (!m.ok()) return m.status().Prefixed(path);
  return m;
}

}  // namespace fanstore::format
