# Writes assertion-vector.json from sig-vectors.json with the Python
# standard library only, so the vector does not come from the code it
# tests: the JWKS of the vector key (x and y cut from its SubjectPublicKeyInfo
# DER) and the bc.assertion= text of the discovery-assertion vector (its
# body and OpenSSL-made signature, wrapped by hand in a
# SignedDiscoveryAssertion{body = 1, sig = 2 {kid = 1, sig = 2}}, then
# unpadded base64url). Run: python3 gen-assertion-vector.py > assertion-vector.json
import base64, json

def b64u(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def varint(n):
    out = b""
    while True:
        b = n & 0x7f; n >>= 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def fbytes(num, b): return varint(num << 3 | 2) + varint(len(b)) + b

v = json.load(open("sig-vectors.json"))
pem = "".join(l for l in v["public_key_pem"].splitlines() if not l.startswith("-----"))
spki = base64.b64decode(pem)
point = spki[-65:]
assert len(spki) == 91 and point[0] == 4
jwks = {"keys": [{"kty": "EC", "crv": "P-256", "x": b64u(point[1:33]), "y": b64u(point[33:]),
                  "kid": v["kid"], "use": "sig", "alg": "ES256"}]}
vec = next(x for x in v["vectors"] if x["purpose"] == "discovery-assertion")
body, sig = bytes.fromhex(vec["parts_hex"][0]), bytes.fromhex(vec["sig_hex"])
wire = fbytes(1, body) + fbytes(2, fbytes(1, v["kid"].encode()) + fbytes(2, sig))
print(json.dumps({
    "comment": "The JWKS of the sig-vectors.json key and the bc.assertion= text of its discovery-assertion vector (issued_at 2026-01-01T00:00:00Z, not_after one hour later, boot_lease_epoch 7). Made by gen-assertion-vector.py with the Python standard library, not with siteboot's code.",
    "jwks": json.dumps(jwks, separators=(",", ":")),
    "assertion_text": b64u(wire),
}, indent=2))
