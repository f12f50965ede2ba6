"""The DLRM trainer fed by the reader."""
