# OpenSSL's SHA-256 for the hash chain (services/store/_chain.pyx) and the signed
# records' MAC (services/bus/_mac.pyx); both extensions link -lcrypto (setup.py).

cdef extern from *:
    """
    /* The one-shot SHA256_* calls are deprecated in OpenSSL 3 in favour of EVP, whose
       per-call provider look-up costs more than hashing a short record or row. */
    #define OPENSSL_SUPPRESS_DEPRECATED 1
    #include <openssl/sha.h>
    #include <openssl/crypto.h>
    """
    ctypedef struct SHA256_CTX:
        pass
    int SHA256_Init(SHA256_CTX *c) nogil
    int SHA256_Update(SHA256_CTX *c, const void *data, size_t n) nogil
    int SHA256_Final(unsigned char *md, SHA256_CTX *c) nogil
    int CRYPTO_memcmp(const void *a, const void *b, size_t n) nogil
