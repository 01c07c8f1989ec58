"""leapcache.chain_hashes against the C++ client's ChainHashes (leapcache_chain_hashes_tool) on the
same tokens, block sizes and salts, and its refusals. No server needed."""

import os
import subprocess

import numpy as np
import pytest
import torch

import leapcache


def cpp_chain(tokens, block_tokens, salt=b""):
    """The C++ chain as hex strings, or (exit code, stderr) if the tool refuses the input."""
    tool = os.environ["LEAPCACHE_CHAIN_HASHES_TOOL"]
    args = [tool, str(block_tokens)] + ([salt.hex()] if salt else [])
    r = subprocess.run(args, input=" ".join(str(int(t)) for t in tokens).encode(),
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        return r.returncode, r.stderr.decode()
    return r.stdout.decode().split()


RNG = np.random.default_rng(29)


@pytest.mark.parametrize("n_tokens,block_tokens,salt", [
    (1000, 16, b""),
    (1000, 16, b"lora:7"),
    (257, 256, b""),                # one full block, one token left over
    (40, 1, b"\x00\xff"),           # block of one token
    (3000, 1024, bytes(range(256)) * 16),  # 4 KiB of salt, the maximum
    (15, 16, b""),                  # no full block: an empty chain
])
def test_equals_cpp_chain(n_tokens, block_tokens, salt):
    tokens = RNG.integers(0, 1 << 32, size=n_tokens, dtype=np.uint64)
    tokens[:3] = [0, (1 << 32) - 1, 151643]  # both ends of the id range
    expected = cpp_chain(tokens, block_tokens, salt)
    assert isinstance(expected, list), expected
    assert len(expected) == n_tokens // block_tokens
    for form in (tokens.tolist(), tokens.astype(np.uint32), tokens.astype(np.int64),
                 torch.from_numpy(tokens.astype(np.int64))):
        chain = leapcache.chain_hashes(form, block_tokens, salt=salt)
        assert [k.hex() for k in chain] == expected


def test_keys_carry_their_position():
    chain = leapcache.chain_hashes(list(range(100)), 16)
    assert len(chain) == 6
    for i, key in enumerate(chain):
        assert isinstance(key, bytes) and len(key) == 32
        assert (key.blocks, key.tokens, key.block_tokens) == (i + 1, 16 * (i + 1), 16)


def test_str_salt_is_utf8_and_salt_changes_every_hash():
    tokens = list(range(64))
    assert leapcache.chain_hashes(tokens, 16, salt="ключ") == \
        leapcache.chain_hashes(tokens, 16, salt="ключ".encode())
    assert [k.hex() for k in leapcache.chain_hashes(tokens, 16, salt="ключ")] == \
        cpp_chain(tokens, 16, "ключ".encode())
    plain = set(leapcache.chain_hashes(tokens, 16))
    salted = set(leapcache.chain_hashes(tokens, 16, salt=b"x"))
    assert not plain & salted


def test_prefix_property():
    tokens = list(range(1000))
    long = leapcache.chain_hashes(tokens, 32)
    short = leapcache.chain_hashes(tokens[:320], 32)
    assert long[:10] == short
    changed = list(tokens)
    changed[100] += 1  # in block 3 (tokens 96..127): blocks 1-3 keep their hashes
    other = leapcache.chain_hashes(changed, 32)
    assert other[:3] == long[:3] and not set(other[3:]) & set(long)


@pytest.mark.parametrize("block_tokens", [0, -1, 65537])
def test_block_size_refused_like_cpp(block_tokens):
    code, message = cpp_chain(range(100), block_tokens)
    assert code == 1
    with pytest.raises(leapcache.InvalidArgumentError) as e:
        leapcache.chain_hashes(list(range(100)), block_tokens)
    assert e.value.code == 3 and e.value.message == message.strip()
    assert isinstance(e.value, ValueError)


def test_salt_over_4kib_refused():
    with pytest.raises(leapcache.InvalidArgumentError):
        leapcache.chain_hashes(list(range(32)), 16, salt=b"x" * 4097)


@pytest.mark.parametrize("tokens,error", [
    ([1, -1, 2], ValueError),
    ([1, 1 << 32], ValueError),
    ([1.0, 2.0], TypeError),
    ("1234", TypeError),
    (np.zeros((2, 16), np.int64), ValueError),
    (np.array([-5, 3]), ValueError),
    (np.zeros(16, np.float32), TypeError),
    (torch.zeros(16), TypeError),
])
def test_bad_tokens(tokens, error):
    with pytest.raises(error):
        leapcache.chain_hashes(tokens, 16)


def test_bad_arguments():
    with pytest.raises(TypeError):
        leapcache.chain_hashes([1, 2], 1.5)
    with pytest.raises(TypeError):
        leapcache.chain_hashes([1, 2], 1, salt=3)
