{
  "algorithm": "ed25519",
  "artifact": "capacity-20261123T130523Z-e60c9415.skops",
  "artifact_sha256": "e60c9415277ae0abf7f7ecc2cab2ae614c1910ad012a95975fa72daed02ec14a",
  "card_sha256": "95acad0491a8dd6bd0885c2bb77f54cf5111b5add8f296354db45ea950ba041a",
  "format": "mcw-model-signature/1",
  "key_id": "69f6656843762c2d",
  "signature": "rgJRy9cNT1nf80aO3vLky45r+MdLqdrDGINnpltFa0lM2CPk+t/a9FiFu0gXo3C9y4m4sKvn1hPoyGwr7IA7Aw=="
}
