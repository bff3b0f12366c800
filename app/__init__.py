"""The product surface: the `hexrag` CLI (and, later, the HTTP chat API)."""
