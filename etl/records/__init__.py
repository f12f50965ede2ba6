"""The record steps that the batch label join and the stream share: landing, quarantine, dedup, attribution, flattening."""
