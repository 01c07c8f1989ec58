// Deterministic test checkpoints for the service's integration tests: dense states drawn from a
// seed, their v1 blobs made with the same CPU reference codec the server embeds, and the
// conversions between the client's types and the format's.
//
// Everything is a pure function of (spec, seed), so a test (or any of its threads) can recompute
// what any hit must return and compare it byte for byte, with no shared oracle.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpu/format/format.h"
#include "leapcache/client.h"

namespace leapcache::testing {

// A small namespace spec (fast under sanitizers): `layers` x `heads` states of d x d.
client::NamespaceSpec SmallNamespace(const std::string& tenant, int layers = 2, int heads = 4,
                                     int d = 16,
                                     client::StorageFormat format = client::StorageFormat::Leap(8));
BlobSpec ToBlobSpec(const client::NamespaceSpec& spec);

// Dense states [layers][heads][dk][dv] (KV layout), Gaussian, from `seed`.
std::vector<float> MakeStates(const client::NamespaceSpec& spec, uint64_t seed);
// The states of heads [h0, h1) only, same layout.
std::vector<float> SliceHeads(const client::NamespaceSpec& spec, const std::vector<float>& states,
                              int h0, int h1);
// KV-layout states to `layout` ([dv][dk] per state for kVK).
std::vector<float> ToLayout(const client::NamespaceSpec& spec, const std::vector<float>& kv,
                            client::Layout layout);
// States in `layout` back to KV layout.
std::vector<float> FromLayout(const client::NamespaceSpec& spec, const std::vector<float>& v,
                              client::Layout layout);
// The blobs of the states (KV layout), in (layer, head) order, concatenated.
std::vector<uint8_t> EncodeBlobs(const client::NamespaceSpec& spec, const std::vector<float>& kv);
// The states the blobs decode to, in `layout`, fp32.
std::vector<float> DecodeBlobs(const client::NamespaceSpec& spec, std::span<const uint8_t> blobs,
                               client::Layout layout);

std::span<const uint8_t> AsBytes(const std::vector<float>& v);
std::vector<float> FloatsOf(std::span<const uint8_t> bytes);
// fp32 -> bf16 bytes (round to nearest even) and back.
std::vector<uint8_t> ToBf16Bytes(const std::vector<float>& v);
std::vector<float> FromBf16Bytes(std::span<const uint8_t> bytes);
// ||a - b|| / ||a||.
double RelativeError(const std::vector<float>& reference, const std::vector<float>& value);

// A distinct 32-byte hash per (i, salt); not a SHA-256 chain (the service treats hashes as opaque).
client::BlockHash TestHash(uint64_t i, uint8_t salt = 0);

}  // namespace leapcache::testing
