# Shell helpers shared by bootstrap/build and bootstrap/verify: read the OCI
# layout inside an oci-archive. Source it; it defines functions only.

# oci_unpack ARCHIVE DIR: extract the archive's OCI layout (index.json, blobs/).
oci_unpack() {
  mkdir -p "$2"
  tar -xf "$1" -C "$2"
}

# oci_blob DIR DIGEST: the bytes of one blob, on stdout.
oci_blob() {
  cat "$1/blobs/${2%%:*}/${2#*:}"
}

# oci_list_digest DIR: digest of the multi-arch index that the layout's
# index.json points at (the digest a registry will show for the pushed tag).
oci_list_digest() {
  jq -r '.manifests[0].digest' "$1/index.json"
}

# oci_images DIR: one line per image in the multi-arch index:
#   ARCH MANIFEST_DIGEST COMPRESSED_SIZE
# where COMPRESSED_SIZE is what a pull transfers: manifest + config + layers.
oci_images() {
  local dir=$1 arch digest manifest_size blobs_size
  oci_blob "$dir" "$(oci_list_digest "$dir")" |
    jq -r '.manifests[] | "\(.platform.architecture) \(.digest) \(.size)"' |
    while read -r arch digest manifest_size; do
      blobs_size=$(oci_blob "$dir" "$digest" | jq '[.config.size, .layers[].size] | add')
      echo "$arch $digest $((manifest_size + blobs_size))"
    done
}

# oci_layers DIR DIGEST: the layer digests of one image manifest, in order.
oci_layers() {
  oci_blob "$1" "$2" | jq -r '.layers[].digest'
}
