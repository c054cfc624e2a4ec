{
  "algorithm": "ed25519",
  "artifact": "capacity-20261122T083255Z-6251e9a1.skops",
  "artifact_sha256": "6251e9a15f11d1295d8923b36d38a826acc8c0aca7f6d8103cac6cd454a8fa1d",
  "card_sha256": "aa4a0d3ce6b6a514b6212b16533a200e8e319e86b5ab3db0eafe12503d44026f",
  "format": "mcw-model-signature/1",
  "key_id": "1463653d6e48b338",
  "signature": "W+KpgbPToYnbn2ymh271J64GpbAhFRVoeAs0QoAJlXXzO2nlHqQK+gVv4zo3M95zPFEYGcJUB14wgV4cqt2aDg=="
}
