# Regenerates sig-vectors.json from key.pem (a P-256 key made once with
# `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`), using
# OpenSSL and the Python standard library only, so the vectors do not come
# from the code they test. Run: python3 gen-sig-vectors.py > sig-vectors.json
# (with key.pem and pub.pem, extracted from sig-vectors.json, in the cwd).
import json, struct, subprocess, base64

def lp(b): return struct.pack(">I", len(b)) + b
def message(purpose, parts):
    m = b"bc-sig-v1\x00" + lp(purpose.encode())
    for p in parts: m += lp(p)
    return m

def varint(n):
    out = b""
    while True:
        b = n & 0x7f; n >>= 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def fbytes(num, b): return varint(num << 3 | 2) + varint(len(b)) + b
def fvarint(num, v): return varint(num << 3 | 0) + varint(v)
def ts(sec): return fvarint(1, sec)

body = (fbytes(1, b"site-a") + fbytes(2, b"appliance-1") + fvarint(3, 7) +
        fbytes(4, b"52:54:00:12:34:56") + fbytes(5, b"10.0.0.50") +
        fbytes(6, b"8f0c1b2a-3d4e-4f50-8a6b-7c8d9e0f1a2b") + fbytes(7, b"wf-42") +
        fbytes(8, ts(1767225600)) + fbytes(9, ts(1767229200)))

def der_to_raw(der):
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 3
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i+1]; v = der[i+2:i+2+n]; i += 2+n
        v = v.lstrip(b"\x00")
        out += v.rjust(32, b"\x00")
    return out

def sign(msg):
    open("msg.bin","wb").write(msg)
    der = subprocess.check_output(["openssl","dgst","-sha256","-sign","key.pem","msg.bin"])
    return der_to_raw(der)

cases = [
  ("discovery-assertion", "discovery-assertion", [body]),
  ("no-parts", "test-purpose", []),
  ("empty-and-binary-parts", "x", [b"", b"abc", b"\x00\xff"]),
]
vectors = []
for name, purpose, parts in cases:
    m = message(purpose, parts)
    vectors.append({"name": name, "purpose": purpose,
      "parts_hex": [p.hex() for p in parts], "message_hex": m.hex(), "sig_hex": sign(m).hex()})
kid = subprocess.check_output("openssl pkey -in key.pem -pubout -outform DER | openssl dgst -sha256 -binary", shell=True)
doc = {
  "comment": "ES256 signing vectors for siteboot (docs/boot-lease-and-signatures.md, Signatures): message = \"bc-sig-v1\" 0x00 || lp(purpose) || lp(part_1) || ... || lp(part_n), lp(x) = uint32_be(len(x)) || x; sig = raw r||s over SHA-256(message); kid = base64url(no padding) of SHA-256(SubjectPublicKeyInfo DER). Produced with OpenSSL and Python, not with siteboot's code. ECDSA is randomized: check the message bytes exactly and verify sig_hex; do not compare signatures.",
  "private_key_pem": open("key.pem").read(),
  "public_key_pem": open("pub.pem").read(),
  "kid": base64.urlsafe_b64encode(kid).decode().rstrip("="),
  "vectors": vectors,
}
print(json.dumps(doc, indent=2))
