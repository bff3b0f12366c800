"""POST /v1/embeddings (OpenAI-compatible; float or base64 float32 vectors)."""

from __future__ import annotations

import base64

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from app.deps import Ready, check_api_key
from app.errors import APIError
from app.openapi import errors_doc
from app.schemas import EmbeddingRequest

router = APIRouter(prefix="/v1", dependencies=[Depends(check_api_key)])
EMBED_MODEL = "hexrag-embed"


@router.post("/embeddings", responses=errors_doc(400, 404, 413))
async def embeddings(req: EmbeddingRequest, state: Ready):
    embedder = state.embedder
    name = embedder.manifest.name
    if req.model not in (None, EMBED_MODEL, name):
        raise APIError(404, f"The model '{req.model}' does not exist; embeddings use '{name}'", "model_not_found",
                       param="model")
    texts = req.input
    ids, _ = await run_in_threadpool(embedder.encode_ids, texts)
    vectors = (await run_in_threadpool(embedder.embed, texts)).vectors

    def encode(v):
        return base64.b64encode(v.astype("<f4").tobytes()).decode() if req.encoding_format == "base64" else v.tolist()

    tokens = sum(len(i) for i in ids)
    return {"object": "list", "model": name,
            "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
