#include "agent/peer_wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace fanstore::agent::wire {
namespace {

std::string Bytes(const Header& h, size_t extra = 0) {
  std::string s(reinterpret_cast<const char*>(&h), sizeof h);
  return s + std::string(extra, 'x');
}

TEST(RequestSize, ChecksTheHeaderBeforeAnyPayload) {
  EXPECT_EQ(RequestSize(Phase::kHello, "").value(), sizeof(Header));
  // A hello is exactly a nonce; anything else is refused on the header alone.
  EXPECT_EQ(RequestSize(Phase::kHello, Bytes({kMagic, kHello, 0, 0, kNonceLen})).value(),
            sizeof(Header) + kNonceLen);
  EXPECT_EQ(RequestSize(Phase::kHello, Bytes({kMagic, kHello, 0, 0, kNonceLen}, kNonceLen)).value(),
            0u);
  EXPECT_FALSE(RequestSize(Phase::kHello, Bytes({kMagic, kHello, 0, 0, 1})).ok());
  // F2: a 4 GiB length is refused before anything is allocated.
  EXPECT_FALSE(RequestSize(Phase::kAuth, Bytes({kMagic, kAuth, 0, 0, 0xffffffffull})).ok());
  EXPECT_FALSE(RequestSize(Phase::kAuth, Bytes({kMagic, kAuth, 0, 0, kMaxCred + 1})).ok());
  EXPECT_EQ(RequestSize(Phase::kAuth, Bytes({kMagic, kAuth, 0, 0, kMaxCred})).value(),
            sizeof(Header) + kMaxCred);
  // Nothing but the handshake before it is done.
  EXPECT_FALSE(RequestSize(Phase::kHello, Bytes({kMagic, kGet, 0, 0, 0})).ok());
  EXPECT_FALSE(RequestSize(Phase::kAuth, Bytes({kMagic, kGetShard, 0, 0, 0})).ok());
  EXPECT_FALSE(RequestSize(Phase::kReady, Bytes({kMagic, kAuth, 0, 0, 10})).ok());
  // Requests carry no payload, and their tag.
  EXPECT_EQ(RequestSize(Phase::kReady, Bytes({kMagic, kGet, 1, 2, 0})).value(),
            sizeof(Header) + kTagLen);
  EXPECT_FALSE(RequestSize(Phase::kReady, Bytes({kMagic, kGet, 1, 2, 1})).ok());
  EXPECT_FALSE(
      RequestSize(Phase::kReady, Bytes({0x31505346, kGet, 1, 2, 0})).ok());  // the old protocol
}

Binding Sample() {
  Binding b;
  b.role = 'S';
  b.job = JobKey("slurm.pmix.42.0", "42");
  b.server_rank = 3;
  b.client_rank = 1;
  Random(b.nonce_c.data(), b.nonce_c.size());
  Random(b.nonce_s.data(), b.nonce_s.size());
  Random(b.key_share.data(), b.key_share.size());
  b.server_ep = "10.0.0.3:4000";
  b.client_ep = "10.0.0.1:51000";
  return b;
}

TEST(Binding, RoundTripsAndNamesTheFieldThatDiffers) {
  const Binding b = Sample();
  auto d = DecodeBinding(EncodeBinding(b));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(CheckBinding(b, *d).ok());
  EXPECT_EQ(d->key_share, b.key_share);
  struct Case {
    void (*change)(Binding*);
    const char* field;
  } cases[] = {
      {[](Binding* x) { x->role = 'C'; }, "role"},
      {[](Binding* x) { x->job = JobKey("slurm.pmix.43.0", "43"); }, "job"},
      {[](Binding* x) { x->server_rank = 2; }, "server rank"},
      {[](Binding* x) { x->client_rank = 0; }, "client rank"},
      {[](Binding* x) { x->nonce_c[0] ^= 1; }, "client nonce"},
      {[](Binding* x) { x->nonce_s[31] ^= 1; }, "server nonce"},
      {[](Binding* x) { x->server_ep = "10.0.0.9:4000"; }, "server endpoint"},
      {[](Binding* x) { x->client_ep = "10.0.0.1:51001"; }, "client endpoint"},
  };
  for (const auto& c : cases) {
    Binding other = b;
    c.change(&other);
    Status st = CheckBinding(b, other);
    EXPECT_FALSE(st.ok()) << c.field;
    EXPECT_NE(st.ToString().find(c.field), std::string::npos) << st.ToString();
  }
}

TEST(Binding, RefusesTruncatedOrPaddedPayloads) {
  const std::string s = EncodeBinding(Sample());
  for (size_t n = 0; n < s.size(); n++) EXPECT_FALSE(DecodeBinding(s.substr(0, n)).ok()) << n;
  EXPECT_FALSE(DecodeBinding(s + "x").ok());
  EXPECT_FALSE(DecodeBinding("plain MUNGE payload").ok());
}

TEST(JobKey, DiffersPerJobAndStep) {
  EXPECT_EQ(JobKey("ns", "1"), JobKey("ns", "1"));
  EXPECT_NE(JobKey("ns", "1"), JobKey("ns", "2"));
  EXPECT_NE(JobKey("slurm.pmix.1.0", ""), JobKey("slurm.pmix.1.1", ""));
  EXPECT_EQ(JobKey("ns", "1").size(), 32u);
}

TEST(Mac, TagsBindHeaderPayloadDirectionAndOrder) {
  Key k;
  Random(k.data(), k.size());
  Header h{kMagic, kGet, 5, 7, 3};
  auto tag = [&](Mac& m, const Header& hh, std::string_view payload) {
    m.Begin(hh);
    m.Update(payload.data(), payload.size());
    return m.Finish();
  };
  Mac a(k, false), b(k, false);
  const Tag t0 = tag(a, h, "abc");
  EXPECT_TRUE(Mac::Equal(t0, tag(b, h, "abc")));  // both ends agree
  // The same message again is the next one: a replay fails.
  Mac c(k, false);
  (void)tag(c, h, "abc");
  EXPECT_FALSE(Mac::Equal(t0, tag(c, h, "abc")));
  // Any change to header or payload, the other direction or another key fails.
  Header h2 = h;
  h2.a = 6;
  Mac d(k, false), e(k, false), f(k, true);
  EXPECT_FALSE(Mac::Equal(t0, tag(d, h2, "abc")));
  EXPECT_FALSE(Mac::Equal(t0, tag(e, h, "abd")));
  EXPECT_FALSE(Mac::Equal(t0, tag(f, h, "abc")));
  Key k2 = k;
  k2[0] ^= 1;
  Mac g(k2, false);
  EXPECT_FALSE(Mac::Equal(t0, tag(g, h, "abc")));
  // The payload may come in pieces.
  Mac p(k, false);
  p.Begin(h);
  p.Update("a", 1);
  p.Update("bc", 2);
  EXPECT_TRUE(Mac::Equal(t0, p.Finish()));
}

// libcrypto computes the tags; they are libsodium's Poly1305 of header and payload under the
// message's one-time key, so agents on either implementation agree.
TEST(Mac, TagsAreLibsodiumsPoly1305UnderTheMessagesKey) {
  ASSERT_TRUE(Mac::UsesLibcrypto());  // else both sides below would be libsodium's
  Key k;
  Random(k.data(), k.size());
  std::string payload(300000, '\0');
  Random(payload.data(), payload.size());
  Mac m(k, true);
  for (uint64_t n = 0; n < 3; n++) {  // message n of one direction
    Header h{kMagic, kGet, static_cast<uint32_t>(n), 7, static_cast<uint32_t>(payload.size())};
    unsigned char sub[crypto_onetimeauth_KEYBYTES];
    crypto_kdf_derive_from_key(sub, sizeof sub, n, "FSP2s2c_", k.data());
    const std::string msg = Bytes(h) + payload;
    Tag want;
    crypto_onetimeauth(want.data(), reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                       sub);
    m.Begin(h);
    m.Update(payload.data(), 100001);  // in uneven pieces
    m.Update(payload.data() + 100001, payload.size() - 100001);
    EXPECT_TRUE(Mac::Equal(want, m.Finish())) << "message " << n;
  }
}

TEST(SessionKey, DependsOnBothSharesAndNonces) {
  Key s, c;
  Nonce nc, ns;
  Random(s.data(), s.size());
  Random(c.data(), c.size());
  Random(nc.data(), nc.size());
  Random(ns.data(), ns.size());
  const Key k = SessionKey(s, c, nc, ns);
  EXPECT_EQ(k, SessionKey(s, c, nc, ns));
  EXPECT_NE(k, SessionKey(c, s, nc, ns));
  EXPECT_NE(k, SessionKey(s, c, ns, nc));
}

}  // namespace
}  // namespace fanstore::agent::wire
