"""GET /v1/models: the chat models (RAG chat and its voice alias) and the embedder."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.deps import Ready, check_api_key
from app.errors import APIError
from app.openapi import errors_doc
from app.routers.embeddings import EMBED_MODEL

router = APIRouter(prefix="/v1", dependencies=[Depends(check_api_key)])


def _ids(state) -> list[str]:
    return [*state.model_ids, EMBED_MODEL, state.embedder.manifest.name]


def _card(model_id: str, created: int) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "hexrag"}


@router.get("/models")
async def list_models(state: Ready):
    created = int(state.started)
    return {"object": "list", "data": [_card(m, created) for m in _ids(state)]}


@router.get("/models/{model_id}", responses=errors_doc(404))
async def get_model(model_id: str, state: Ready):
    if model_id not in _ids(state):
        raise APIError(404, f"The model '{model_id}' does not exist", "model_not_found", param="model")
    return _card(model_id, int(state.started))
