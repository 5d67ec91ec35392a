#!/usr/bin/env bash
# Make what a TLS + SuperNode-authentication deployment of Flower needs:
#   OUT_DIR/ca.crt, ca.key          a private certificate authority (keep ca.key offline)
#   OUT_DIR/server.pem, server.key  the SuperLink's certificate (signed by the CA) and key
#   OUT_DIR/keys/supernode-<i>      one ECDSA P-384 key pair per SuperNode (OpenSSH format;
#   OUT_DIR/keys/supernode-<i>.pub  the SuperLink learns the .pub via `flwr supernode register`)
#
# The server certificate is valid for localhost, 127.0.0.1 and ::1, plus every -H hostname and
# -I IP address you give: use the name/IP the SuperNodes and `flwr run` connect to.
#
# Usage: generate_certs.sh [-d OUT_DIR] [-H HOSTNAME]... [-I IP]... [-n NUM_SUPERNODES]
#                          [-D DAYS] [-f]
#   -d  output directory (default: ./certificates)
#   -H  extra DNS name for the SuperLink certificate (repeatable), e.g. -H superlink.lan
#   -I  extra IP address for the SuperLink certificate (repeatable), e.g. -I 192.168.1.10
#   -n  number of SuperNode key pairs to make (default: 0)
#   -D  validity in days (default: 365)
#   -f  overwrite existing files
# Needs: openssl (1.1.1 or 3.x) and ssh-keygen (OpenSSH client) for the SuperNode keys.
set -euo pipefail

OUT_DIR="./certificates"
DAYS=365
NUM_SUPERNODES=0
FORCE=0
DNS_NAMES=("localhost")
IPS=("127.0.0.1" "::1")

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-0}"; }

while getopts "d:H:I:n:D:fh" opt; do
  case "$opt" in
    d) OUT_DIR="$OPTARG" ;;
    H) DNS_NAMES+=("$OPTARG") ;;
    I) IPS+=("$OPTARG") ;;
    n) NUM_SUPERNODES="$OPTARG" ;;
    D) DAYS="$OPTARG" ;;
    f) FORCE=1 ;;
    h) usage 0 ;;
    *) usage 2 ;;
  esac
done

command -v openssl >/dev/null || { echo "openssl not found" >&2; exit 1; }
if [ "$NUM_SUPERNODES" -gt 0 ]; then
  command -v ssh-keygen >/dev/null || { echo "ssh-keygen not found (install openssh-client)" >&2; exit 1; }
fi

mkdir -p "$OUT_DIR/keys"
if [ "$FORCE" -eq 0 ] && [ -e "$OUT_DIR/ca.crt" ]; then
  echo "$OUT_DIR/ca.crt exists: use -f to overwrite" >&2
  exit 1
fi
umask 077  # private keys readable by their owner only

# Subject alternative names: every name and address clients use to reach the SuperLink.
SAN=""
i=1; for name in "${DNS_NAMES[@]}"; do SAN+="DNS.$i = $name"$'\n'; i=$((i + 1)); done
i=1; for ip in "${IPS[@]}"; do SAN+="IP.$i = $ip"$'\n'; i=$((i + 1)); done

CONF="$OUT_DIR/openssl.cnf"
cat > "$CONF" <<CNF
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = ${DNS_NAMES[${#DNS_NAMES[@]}-1]}
O = fl-async
[ v3_ca ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ v3_server ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
subjectAltName = @alt_names
[ alt_names ]
$SAN
CNF

# 1. The certificate authority.
openssl genrsa -out "$OUT_DIR/ca.key" 4096 2>/dev/null
openssl req -x509 -new -key "$OUT_DIR/ca.key" -sha256 -days "$DAYS" \
  -subj "/O=fl-async/CN=fl-async edge CA" -config "$CONF" -extensions v3_ca \
  -out "$OUT_DIR/ca.crt"

# 2. The SuperLink's key and certificate, signed by the CA.
openssl genrsa -out "$OUT_DIR/server.key" 4096 2>/dev/null
openssl req -new -key "$OUT_DIR/server.key" -config "$CONF" -out "$OUT_DIR/server.csr"
openssl x509 -req -in "$OUT_DIR/server.csr" -CA "$OUT_DIR/ca.crt" -CAkey "$OUT_DIR/ca.key" \
  -CAcreateserial -out "$OUT_DIR/server.pem" -days "$DAYS" -sha256 \
  -extfile "$CONF" -extensions v3_server 2>/dev/null
rm -f "$OUT_DIR/server.csr"
chmod 644 "$OUT_DIR/ca.crt" "$OUT_DIR/server.pem"
openssl verify -CAfile "$OUT_DIR/ca.crt" "$OUT_DIR/server.pem" >/dev/null

# 3. One key pair per SuperNode (ECDSA on NIST P-384, as Flower's SuperNode auth requires).
for ((k = 1; k <= NUM_SUPERNODES; k++)); do
  key="$OUT_DIR/keys/supernode-$k"
  rm -f "$key" "$key.pub"
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "supernode-$k" -f "$key"
  chmod 644 "$key.pub"
done

echo "CA:        $OUT_DIR/ca.crt"
echo "SuperLink: $OUT_DIR/server.pem, $OUT_DIR/server.key (SAN: ${DNS_NAMES[*]} ${IPS[*]})"
[ "$NUM_SUPERNODES" -gt 0 ] && echo "SuperNode keys: $OUT_DIR/keys/supernode-{1..$NUM_SUPERNODES}[.pub]"
exit 0
