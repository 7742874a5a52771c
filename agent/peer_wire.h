// The peer protocol's messages, handshake bindings and message authentication: pure
// functions, no sockets, so that every rule is unit-tested and fuzzed (tests/fuzz/peer_fuzz.cc).
//
// Every message is a Header {magic, op, a, b, len} and `len` payload bytes; once a session
// is keyed, each is followed by a 16-byte Poly1305 tag over header and payload, under a key
// derived from the session key, the direction and the message's number in that direction.
// No message can be injected, replayed, reordered or cut short without the tag failing.
//
// Handshake (docs/security.md, "Peer service"):
//   C -> S  kHello  a = client rank, b = server rank,  payload: nonce_c (32 bytes)
//   S -> C  kHello  a = 0 (status), b = server rank,  payload: nonce_s (32) + MUNGE cred_s
//   C -> S  kAuth                                     payload: MUNGE cred_c
//   S -> C  kAuth   a = 0 (status), tagged            (the first message under the session key)
// Each credential is made for the job's uid only (MUNGE's uid restriction: no other user can
// decode it) and carries a Binding: its role, the job, both ranks, both nonces, both
// endpoints as the maker sees them, and the maker's half of the session key. The client
// checks the server's binding before it sends a credential of its own, so a credential is
// never handed to a server that has not proved itself; fresh nonces on both sides make a
// replayed credential useless (and munged refuses replays as well).
#pragma once

#include <openssl/types.h>
#include <sodium.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fanstore::agent::wire {

inline constexpr uint32_t kMagic = 0x32505346;  // "FSP2"
enum Op : uint32_t { kHello = 1, kAuth = 2, kGet = 3, kGetShard = 4, kGetMessages = 5 };
inline constexpr uint32_t kEndOfShard = 0xffffffffu;

inline constexpr size_t kNonceLen = 32;
inline constexpr size_t kKeyLen = 32;
inline constexpr size_t kTagLen = 16;
// A MUNGE credential with our binding is about 400 bytes; anything longer is refused before
// a byte of it is stored.
inline constexpr size_t kMaxCred = 4096;

struct Header {
  uint32_t magic, op, a, b;
  uint64_t len;
};
static_assert(sizeof(Header) == 24, "packed wire header");

using Nonce = std::array<uint8_t, kNonceLen>;
using Key = std::array<uint8_t, kKeyLen>;
using Tag = std::array<uint8_t, kTagLen>;

// Where a connection is in the handshake, from the server's side.
enum class Phase { kHello, kAuth, kReady };

// The longest payload the server accepts in `phase` for `op`, or -1 when the op is not
// allowed there. Checked on the header alone, before anything is allocated.
int64_t MaxRequestPayload(Phase phase, uint32_t op);

// What the server must have buffered before a request is complete: header, payload, and the
// tag once keyed. Returns 0 when `have` bytes hold a complete request, the total it needs
// when more must come, or an error (bad magic, an op not allowed in this phase, a length over
// its limit).
Result<size_t> RequestSize(Phase phase, std::string_view have);

// What a credential certifies beyond the uid.
struct Binding {
  char role = 0;    // 'S' server, 'C' client
  std::string job;  // the job's key (Job below)
  uint32_t server_rank = 0, client_rank = 0;
  Nonce nonce_c{}, nonce_s{};
  std::string server_ep, client_ep;  // "a.b.c.d:port"
  Key key_share{};
};
std::string EncodeBinding(const Binding& b);
Result<Binding> DecodeBinding(std::string_view s);
// Whether `got` is what `want` expects, key shares aside. The error says which field differs.
Status CheckBinding(const Binding& want, const Binding& got);

// The job's key: every agent of one job computes the same from the PMIx namespace (unique
// per job step) and the Slurm job id when there is one.
std::string JobKey(std::string_view nspace, std::string_view job_id);

// Message authentication in one direction of a keyed session: Poly1305 with a one-time key per
// message. OpenSSL's libcrypto computes it (its vector code runs at 3x libsodium's rate here,
// docs/design.md); libsodium's when libcrypto offers no Poly1305 (a FIPS-only provider). The
// two give the same tags.
class Mac {
 public:
  Mac() = default;
  Mac(const Key& session, bool server_to_client);
  // Tag of the next message: header and payload (which may come in pieces).
  void Begin(const Header& h);
  void Update(const void* data, size_t len);
  Tag Finish();  // and moves on to the next message number
  bool Verify(const Tag& t) { return Equal(Finish(), t); }
  static bool Equal(const Tag& a, const Tag& b);
  static bool UsesLibcrypto();  // false: libcrypto has no Poly1305 here, libsodium's is used

 private:
  struct CtxFree {
    void operator()(EVP_MAC_CTX* c) const;
  };
  Key key_{};
  bool dir_ = false;
  uint64_t counter_ = 0;
  bool failed_ = false;  // a libcrypto call failed: this message's tag matches nothing
  std::unique_ptr<EVP_MAC_CTX, CtxFree> ctx_;  // null: libsodium's state below
  crypto_onetimeauth_state state_;
};

// The session key both sides derive once the handshake is done.
Key SessionKey(const Key& share_s, const Key& share_c, const Nonce& nonce_c, const Nonce& nonce_s);
// Fresh random bytes (libsodium's getrandom).
void Random(void* buf, size_t len);

}  // namespace fanstore::agent::wire
