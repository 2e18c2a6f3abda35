#!/usr/bin/env bash
# Makes the TLS tests' certificates in DIR with openssl: a CA, a server
# certificate it signs (for localhost and 127.0.0.1), a client certificate
# it signs, and a second CA with a client certificate of its own. Keys are
# EC P-256, valid for two days; nothing here is a secret.
#   make_test_certs.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2> /dev/null; }
ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$1" -days 2 -out "$1.pem" 2> /dev/null
}
# leaf NAME CA [SUBJECT_ALT_NAMES]
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -subj "/CN=$1" -out "$1.csr" 2> /dev/null
  local ext
  ext=$(mktemp)
  echo "basicConstraints=CA:FALSE" > "$ext"
  [ -n "${3:-}" ] && echo "subjectAltName=$3" >> "$ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
    -extfile "$ext" -out "$1.pem" 2> /dev/null
  rm -f "$ext" "$1.csr"
}
ca ca
leaf server ca "DNS:localhost,IP:127.0.0.1"
leaf client ca
ca other-ca
leaf other-client other-ca
