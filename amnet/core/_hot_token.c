/* amnet.core._hot: the Token type handed to a handler (its reply_* methods and
 * attributes). Tokens are made and recycled by the handler call, in _hot_queue.c. */

#include "_hot.h"

/* ------------------------------------------------------------------------------------ */
/* Token                                                                                  */

PyObject *
hot_token_name(TokenObject *tok)
{
    if (tok->name != NULL) {
        Py_INCREF(tok->name);
        return tok->name;
    }
    Slot *s = &tok->hot->slots[tok->t];
    PyObject *n = s->names != NULL && tok->hidx >= 0 ? list_ref(s->names, tok->hidx) : NULL;
    if (n != NULL) {
        return n;
    }
    return PyUnicode_FromString("?");
}

static void
Token_dealloc(TokenObject *tok)
{
    Py_XDECREF(tok->name);
    Py_XDECREF(tok->hot);
    PyObject_Free(tok);
}

static int
token_check(TokenObject *tok, const char *what)
{
    if (!__atomic_load_n(&tok->live, __ATOMIC_ACQUIRE)) {
        PyObject *nm = hot_token_name(tok);
        PyErr_Format(AMContextError, "%s after handler %S returned; a reply must be "
                     "sent from inside the request handler", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (!tok->is_request) {
        PyObject *nm = hot_token_name(tok);
        PyErr_Format(AMContextError, "%s in reply handler %S: a reply handler sends "
                     "nothing", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (tok->replied) {
        PyObject *nm = hot_token_name(tok);
        PyErr_Format(AMContextError, "%s: request handler %S already replied; a "
                     "request handler replies at most once", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (tok->thread != PyThread_get_thread_ident()
            || PyThread_tss_get(&cur_token) != (void *)tok) {
        PyObject *nm = hot_token_name(tok);
        PyErr_Format(AMContextError, "%s from another thread than the one running "
                     "handler %S", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (tok->hot->slots == NULL || tok->hot->py_send == NULL) {
        PyErr_SetString(AMContextError, "the engine of this token is closed");
        return -1;
    }
    return 0;
}

/* reply_*(handler, ...): `fixed` positional arguments of the AM's own (see send_am_args),
 * then its args; to the requester */
static PyObject *
token_reply(TokenObject *tok, int cat, const char *what, PyObject *const *args,
            Py_ssize_t nargs, Py_ssize_t fixed)
{
    if (token_check(tok, what) < 0 || enough_args(what, nargs, fixed) < 0) {
        return NULL;
    }
    PyObject *src = PyLong_FromLong(tok->source);
    if (src == NULL) {
        return NULL;
    }
    int rc = send_am_args(tok->hot, tok->t, cat | F_REPLY, src, args, nargs, fixed);
    Py_DECREF(src);
    if (rc < 0) {
        return NULL;
    }
    tok->replied = 1;
    Py_RETURN_NONE;
}

HOT_AM_METHOD(Token_, TokenObject, "token", reply_short, token_reply, C_SHORT, 1)
HOT_AM_METHOD(Token_, TokenObject, "token", reply_medium, token_reply, C_MEDIUM, 2)
HOT_AM_METHOD(Token_, TokenObject, "token", reply_long, token_reply, C_LONG, 3)

static PyObject *
Token_repr(TokenObject *tok)
{
    PyObject *nm = hot_token_name(tok);
    if (nm == NULL) return NULL;
    PyObject *r = PyUnicode_FromFormat("<amnet.Token %s %S from rank %ld>",
                                       tok->is_request ? "request" : "reply", nm, tok->source);
    Py_DECREF(nm);
    return r;
}

static PyObject *
Token_get_rank(TokenObject *tok, void *c)
{
    return PyLong_FromLong(tok->hot->slots != NULL ? tok->hot->slots[tok->t].rank : -1);
}

static PyObject *
Token_get_source(TokenObject *tok, void *c)
{
    return PyLong_FromLong(tok->source);
}

static PyObject *
Token_get_is_request(TokenObject *tok, void *c)
{
    return PyBool_FromLong(tok->is_request);
}

static PyObject *
Token_get_handler(TokenObject *tok, void *c)
{
    return hot_token_name(tok);
}

/* The Endpoint of the rank the AM was sent to. Made before the rank could be reached (see
 * Engine.add_rank), so it is there even while that rank-thread is still in amnet.init(). */
static PyObject *
Token_get_endpoint(TokenObject *tok, void *c)
{
    PyObject *rs = tok->hot->slots != NULL ? slot_rs(&tok->hot->slots[tok->t]) : NULL;
    PyObject *ep = rs != NULL ? PyObject_GetAttrString(rs, "endpoint") : NULL;
    if (ep == NULL || ep == Py_None) {
        Py_XDECREF(ep);
        PyErr_Clear();
        PyErr_SetString(InitError, "this token's rank has no endpoint (its engine is closed)");
        return NULL;
    }
    return ep;
}

static PyMethodDef Token_methods[] = {
    {"reply_short", (PyCFunction)(void (*)(void))Token_reply_short, METH_FASTCALL,
     "reply_short($self, handler, /, *args)\n--\n\n"
     "Send a Short reply to ``token.source``.\n\n"
     "Raises:\n    AMContextError: not in a request handler, or it already replied.\n"
     "    HandlerNotRegistered / HandlerCategoryError / AMArgumentError: bad handler or args."},
    {"reply_medium", (PyCFunction)(void (*)(void))Token_reply_medium, METH_FASTCALL,
     "reply_medium($self, handler, payload, /, *args)\n--\n\n"
     "Send a Medium reply (payload of at most ``ep.max_medium`` bytes) to the source; the "
     "payload may be reused as soon as the call returns.\n\n"
     "Raises: as :meth:`reply_short`, plus PayloadTooLarge."},
    {"reply_long", (PyCFunction)(void (*)(void))Token_reply_long, METH_FASTCALL,
     "reply_long($self, handler, payload, dest_offset, /, *args)\n--\n\n"
     "Send a Long reply: ``payload`` lands at ``dest_offset`` in the source's segment.\n\n"
     "Raises: as :meth:`reply_short`, plus SegmentBoundsError."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Token_get_replied(TokenObject *tok, void *c)
{
    return PyBool_FromLong(tok->replied);
}

static int
Token_set_replied(TokenObject *tok, PyObject *v, void *c)
{
    int b = v == NULL ? 0 : PyObject_IsTrue(v);
    if (b < 0) {
        return -1;
    }
    tok->replied = (char)b;
    return 0;
}

static PyObject *
Token_get_live(TokenObject *tok, void *c)
{
    return PyBool_FromLong(__atomic_load_n(&tok->live, __ATOMIC_ACQUIRE));
}

static PyGetSetDef Token_getset[] = {
    {"_live", (getter)Token_get_live, NULL,
     "Whether its handler is still running (the engine holds back what it deferred).", NULL},
    {"_replied", (getter)Token_get_replied, (setter)Token_set_replied,
     "Whether the handler replied (amnet's rpc sets it: the system sends the reply).", NULL},
    {"rank", (getter)Token_get_rank, NULL,
     "The rank the AM was sent to (the one whose handler runs).", NULL},
    {"source", (getter)Token_get_source, NULL, "The rank that sent the AM.", NULL},
    {"is_request", (getter)Token_get_is_request, NULL,
     "True in a request handler, False in a reply handler.", NULL},
    {"handler", (getter)Token_get_handler, NULL, "The running handler's name.", NULL},
    {"endpoint", (getter)Token_get_endpoint, NULL,
     "The Endpoint of the rank the AM was sent to (``token.rank``): what a handler uses to "
     "reach its rank (segment, handlers, rank numbers). Safe even while that rank-thread is "
     "still in amnet.init(), where a script's global ``ep`` may not be set yet.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Token_Type = AMNET_TYPE(
    Token, TokenObject, "amnet.Token", Py_TPFLAGS_DEFAULT,
    .tp_doc = "Handed to a handler: who sent the AM and how to reply. Valid only during the "
              "call; made by amnet, never by the user.",
    .tp_repr = (reprfunc)Token_repr, .tp_methods = Token_methods, .tp_getset = Token_getset);
