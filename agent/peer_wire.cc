#include "agent/peer_wire.h"

#include <openssl/evp.h>

#include <cstring>

namespace fanstore::agent::wire {
namespace {

// libsodium picks its implementations once, before any use (thread-safe, idempotent).
const int kSodiumReady = sodium_init();

// libcrypto's Poly1305, fetched once; null when its providers have none.
EVP_MAC* Poly1305() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
  return mac;
}

constexpr char kBindingMagic[4] = {'F', 'S', 'B', '1'};
constexpr size_t kMaxField = 128;  // job key and endpoints

void PutU32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void PutField(std::string& s, std::string_view f) {
  const uint16_t n = static_cast<uint16_t>(f.size());
  s.append(reinterpret_cast<const char*>(&n), 2);
  s.append(f);
}

// Consumes fixed-size pieces of an untrusted string; every read is bounds-checked.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  bool Take(void* out, size_t n) {
    if (s_.size() < n) return false;
    std::memcpy(out, s_.data(), n);
    s_.remove_prefix(n);
    return true;
  }
  bool Field(std::string* out) {
    uint16_t n;
    if (!Take(&n, 2) || n > kMaxField || s_.size() < n) return false;
    out->assign(s_.data(), n);
    s_.remove_prefix(n);
    return true;
  }
  bool empty() const { return s_.empty(); }

 private:
  std::string_view s_;
};

}  // namespace

int64_t MaxRequestPayload(Phase phase, uint32_t op) {
  switch (phase) {
    case Phase::kHello:
      return op == kHello ? static_cast<int64_t>(kNonceLen) : -1;
    case Phase::kAuth:
      return op == kAuth ? static_cast<int64_t>(kMaxCred) : -1;
    case Phase::kReady:
      return op == kGet || op == kGetShard || op == kGetMessages ? 0 : -1;
  }
  return -1;
}

Result<size_t> RequestSize(Phase phase, std::string_view have) {
  if (have.size() < sizeof(Header)) return sizeof(Header);
  Header h;
  std::memcpy(&h, have.data(), sizeof h);
  if (h.magic != kMagic) return Status::Corruption("not a FanStore peer request (bad magic)");
  const int64_t max = MaxRequestPayload(phase, h.op);
  if (max < 0) return Status::Permission("request " + std::to_string(h.op) + " not allowed here");
  if (h.len > static_cast<uint64_t>(max))
    return Status::InvalidArgument("request of " + std::to_string(h.len) + " bytes");
  if (phase == Phase::kHello && h.len != kNonceLen)
    return Status::InvalidArgument("hello without a nonce");
  const size_t need =
      sizeof(Header) + static_cast<size_t>(h.len) + (phase == Phase::kReady ? kTagLen : 0);
  return have.size() >= need ? 0 : need;
}

std::string EncodeBinding(const Binding& b) {
  std::string s(kBindingMagic, 4);
  s += b.role;
  PutU32(s, b.server_rank);
  PutU32(s, b.client_rank);
  s.append(reinterpret_cast<const char*>(b.nonce_c.data()), kNonceLen);
  s.append(reinterpret_cast<const char*>(b.nonce_s.data()), kNonceLen);
  s.append(reinterpret_cast<const char*>(b.key_share.data()), kKeyLen);
  PutField(s, b.job.substr(0, kMaxField));
  PutField(s, b.server_ep.substr(0, kMaxField));
  PutField(s, b.client_ep.substr(0, kMaxField));
  return s;
}

Result<Binding> DecodeBinding(std::string_view s) {
  Binding b;
  char magic[4];
  Cursor c(s);
  if (!c.Take(magic, 4) || std::memcmp(magic, kBindingMagic, 4) != 0 || !c.Take(&b.role, 1) ||
      !c.Take(&b.server_rank, 4) || !c.Take(&b.client_rank, 4) ||
      !c.Take(b.nonce_c.data(), kNonceLen) || !c.Take(b.nonce_s.data(), kNonceLen) ||
      !c.Take(b.key_share.data(), kKeyLen) || !c.Field(&b.job) || !c.Field(&b.server_ep) ||
      !c.Field(&b.client_ep) || !c.empty())
    return Status::Corruption("credential without a FanStore binding");
  return b;
}

Status CheckBinding(const Binding& want, const Binding& got) {
  const char* what = got.role != want.role                 ? "role"
                     : got.job != want.job                 ? "job"
                     : got.server_rank != want.server_rank ? "server rank"
                     : got.client_rank != want.client_rank ? "client rank"
                     : got.nonce_c != want.nonce_c         ? "client nonce (a replay)"
                     : got.nonce_s != want.nonce_s         ? "server nonce (a replay)"
                     : got.server_ep != want.server_ep     ? "server endpoint"
                     : got.client_ep != want.client_ep     ? "client endpoint"
                                                           : nullptr;
  if (!what) return Status::OK();
  return Status::Permission(std::string("credential bound to another ") + what);
}

std::string JobKey(std::string_view nspace, std::string_view job_id) {
  std::string in = "fanstore-job\n" + std::string(nspace) + "\n" + std::string(job_id);
  unsigned char h[16];
  crypto_generichash(h, sizeof h, reinterpret_cast<const unsigned char*>(in.data()), in.size(),
                     nullptr, 0);
  char hex[2 * sizeof h + 1];
  sodium_bin2hex(hex, sizeof hex, h, sizeof h);
  return hex;
}

void Mac::CtxFree::operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }

// The implementation is chosen once per session and direction.
Mac::Mac(const Key& session, bool server_to_client)
    : key_(session),
      dir_(server_to_client),
      ctx_(UsesLibcrypto() ? EVP_MAC_CTX_new(Poly1305()) : nullptr) {}

void Mac::Begin(const Header& h) {
  // One-time Poly1305 key per message: never reused, whatever the message count.
  unsigned char sub[crypto_onetimeauth_KEYBYTES];
  static_assert(crypto_onetimeauth_KEYBYTES == crypto_kdf_KEYBYTES, "one-time key from the KDF");
  crypto_kdf_derive_from_key(sub, sizeof sub, counter_, dir_ ? "FSP2s2c_" : "FSP2c2s_",
                             key_.data());
  failed_ = ctx_ && EVP_MAC_init(ctx_.get(), sub, sizeof sub, nullptr) != 1;
  if (!ctx_) crypto_onetimeauth_init(&state_, sub);
  sodium_memzero(sub, sizeof sub);
  Update(&h, sizeof h);
}

void Mac::Update(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (!ctx_)
    crypto_onetimeauth_update(&state_, p, len);
  else if (!failed_)
    failed_ = EVP_MAC_update(ctx_.get(), p, len) != 1;
}

Tag Mac::Finish() {
  Tag t;
  size_t n = 0;
  if (!ctx_)
    crypto_onetimeauth_final(&state_, t.data());
  else if (failed_ || EVP_MAC_final(ctx_.get(), t.data(), &n, t.size()) != 1 || n != t.size())
    Random(t.data(), t.size());  // a tag that matches nothing: the message is refused
  counter_++;
  return t;
}

bool Mac::UsesLibcrypto() { return Poly1305() != nullptr; }

bool Mac::Equal(const Tag& a, const Tag& b) { return crypto_verify_16(a.data(), b.data()) == 0; }

Key SessionKey(const Key& share_s, const Key& share_c, const Nonce& nonce_c, const Nonce& nonce_s) {
  Key k;
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, k.size());
  static const char kLabel[] = "fanstore peer session v2";
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kLabel), sizeof kLabel);
  for (const auto* part : {&share_s, &share_c})
    crypto_generichash_update(&st, part->data(), part->size());
  for (const auto* part : {&nonce_c, &nonce_s})
    crypto_generichash_update(&st, part->data(), part->size());
  crypto_generichash_final(&st, k.data(), k.size());
  return k;
}

void Random(void* buf, size_t len) {
  (void)kSodiumReady;
  randombytes_buf(buf, len);
}

}  // namespace fanstore::agent::wire
