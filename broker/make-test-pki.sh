#!/usr/bin/env bash
# Make a throw-away test PKI for the mcw MQTT channel (NOT for production).
#
# usage: make-test-pki.sh OUT_DIR [N_CPES] [FIRST_INDEX] [N_PROXIES]
#
#   OUT_DIR      created if missing; existing CA / server / xApp files are reused,
#                so the script can be re-run to add CPE certificates.
#   N_CPES       number of CPE client certificates, default 3
#   FIRST_INDEX  index of the first CPE, default 1 (CN = cpe-%04d)
#   N_PROXIES    number of MPTCP proxy client certificates, default 1
#                (CN = proxy-0001 .. proxy-%04d)
#
# Writes (all PEM, keys mode 0600):
#   ca.crt ca.key              test CA (EC P-256, 10 years)
#   server.crt server.key      broker cert, SAN DNS:localhost, IP:127.0.0.1, IP:::1
#   xapp.crt xapp.key          xApp client cert, CN=mcw-xapp
#   rogue-ca.crt rogue.crt rogue.key
#                              a client cert with CN=cpe-0001 signed by a DIFFERENT
#                              CA, for "untrusted certificate is refused" tests
#   cpe/cpe-XXXX.crt cpe/cpe-XXXX.key   one client cert per CPE, CN=cpe_id
#   proxy/proxy-XXXX.crt proxy/proxy-XXXX.key
#                              one client cert per proxy agent, CN=proxy_id
#
# CPE and proxy CNs come from disjoint name spaces (cpe-*, proxy-*): the broker ACL
# knows a proxy only by its CN, so a CPE certificate with a proxy's CN would be that proxy.
#
# Keys are EC P-256: key generation and the TLS handshake are ~50x cheaper than
# RSA-3072, which matters for the 10,000-client benchmark (10,000 real per-CPE
# certificates are made in about a minute on 2 cores; set JOBS to parallelise).
# Every CPE gets its own certificate: the benchmark does not share one.
set -euo pipefail

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit 2
fi
out=$1
n=${2:-3}
first=${3:-1}
proxies=${4:-1}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if ! [[ "$n" =~ ^[0-9]+$ && "$first" =~ ^[0-9]+$ && "$proxies" =~ ^[0-9]+$ ]]; then
  echo "make-test-pki.sh: N_CPES, FIRST_INDEX and N_PROXIES must be non-negative integers" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "make-test-pki.sh: openssl not found" >&2; exit 1; }

mkdir -p "$out/cpe" "$out/proxy"
umask 077
cd "$out"

curve=prime256v1
days=3650

# new_leaf NAME CN EXT_FILE CA_CRT CA_KEY: key + cert signed by the CA in one go.
new_leaf() {
  local name=$1 cn=$2 ext=$3 ca_crt=$4 ca_key=$5
  openssl req -new -x509 -newkey ec -pkeyopt ec_paramgen_curve:$curve -nodes \
    -keyout "$name.key" -out "$name.crt" -days $days -subj "/O=mcw-test/CN=$cn" \
    -CA "$ca_crt" -CAkey "$ca_key" -extensions leaf -config "$ext" 2>/dev/null
}

if [[ ! -s ca.crt || ! -s ca.key ]]; then
  openssl req -new -x509 -newkey ec -pkeyopt ec_paramgen_curve:$curve -nodes \
    -keyout ca.key -out ca.crt -days $days -subj "/O=mcw-test/CN=mcw test CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

cat > client.ext <<'EXT'
[req]
distinguished_name = dn
[dn]
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EXT
cat > server.ext <<'EXT'
[req]
distinguished_name = dn
[dn]
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1,IP:::1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EXT

[[ -s server.crt ]] || new_leaf server localhost server.ext ca.crt ca.key
[[ -s xapp.crt ]] || new_leaf xapp mcw-xapp client.ext ca.crt ca.key

if [[ ! -s rogue.crt ]]; then
  openssl req -new -x509 -newkey ec -pkeyopt ec_paramgen_curve:$curve -nodes \
    -keyout rogue-ca.key -out rogue-ca.crt -days $days -subj "/O=rogue/CN=rogue CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  new_leaf rogue cpe-0001 client.ext rogue-ca.crt rogue-ca.key
fi

# CPE certificates, in parallel; existing ones are kept.
export -f new_leaf
export curve days
last=$((first + n - 1))
if (( n > 0 )); then
  seq "$first" "$last" | while read -r i; do
    name=$(printf 'cpe-%04d' "$i")
    [[ -s "cpe/$name.crt" ]] || echo "$name"
  done | xargs -r -P "$jobs" -I{} bash -c 'new_leaf "cpe/$1" "$1" client.ext ca.crt ca.key' _ {}
fi

if (( proxies > 0 )); then
  seq 1 "$proxies" | while read -r i; do
    name=$(printf 'proxy-%04d' "$i")
    [[ -s "proxy/$name.crt" ]] || echo "$name"
  done | xargs -r -P "$jobs" -I{} bash -c 'new_leaf "proxy/$1" "$1" client.ext ca.crt ca.key' _ {}
fi

chmod 0644 ./*.crt cpe/*.crt proxy/*.crt 2>/dev/null || true
echo "test PKI in $out: CA, server, xApp (CN=mcw-xapp), $n CPE certificates from $(printf 'cpe-%04d' "$first"), $proxies proxy certificates"
