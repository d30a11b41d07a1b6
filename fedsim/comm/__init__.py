"""What a message costs and how it is compressed: the byte ledger, the uplink compressors (one file each, behind
one seam), the downlink, and the split runtime's activation codecs."""
