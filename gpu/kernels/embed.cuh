// embed.cuh: the device functions pointwise.cu and rows.cu share (gpu/
// kernels' Programs put it before their source): the row an embedding's
// id names (the forward in pointwise.cu, the weight gradient in rows.cu)
// and GELU (pointwise.cu's element-wise kernels, rows.cu's backward fused
// with the bias gradient's column sums).

// The row of a table of num rows that id names (nn's ids are float32),
// or -1 when id is not an integer in [0, num).
__device__ long long embed_row(float id, int num) {
	return id >= 0.0f && id < (float)num && id == floorf(id) ? (long long)id : -1;
}

// gelu is vecmath's GELU kernel for one element (its "go" set, geluGo,
// which the AVX2 and AVX-512 sets reproduce bit for bit) with nn's
// constants: Phi(-|x|) = exp(-x^2/2) u S(u), u = 1/(1 + k|x|), x^2 as
// hi + lo, exp by Cody-Waite reduction and a degree-7 polynomial, fused
// multiply-adds where it fuses (fmaf), every other operation rounded on
// its own. y = x Phi(x); *d = Phi(x) + x phi(x), the derivative. The
// constants are float32 bit patterns (F): vecmath.NewGELUConsts(millsK,
// millsS) of nn, TestGELU checks them.
#define F(bits) __int_as_float(bits)
__device__ float gelu(float xv, float *d) {
	const float clamp = 20.0f, mhalf = -0.5f, lowest = -87.0f, log2e = F(0x3fb8aa3b);
	const float ln2hi = 0.693359375f, ln2lo = F(0xb95e8083), one = 1.0f, half = 0.5f;
	const float mk = F(0x3e75c28f), invSqrt2Pi = F(0x3ecc422a);
	const float ex[6] = {F(0x39500d01), F(0x3ab60b61), F(0x3c088889), F(0x3d2aaaab), F(0x3e2aaaab), 0.5f};
	const float S[10] = {F(0x3dc41457), F(0x3dc45235), F(0x3db618b5), F(0x3db3ea11), F(0x3ce4b83d),
			     F(0x3e11451e), F(0xbe1437c8), F(0x3e52c235), F(0xbdff8a55), F(0x3cd14f7c)};
	float t = __int_as_float(__float_as_int(xv) & 0x7fffffff);
	if (clamp < t) t = clamp; // a NaN stays
	float hi = t * t;
	float lo = fmaf(t, t, -hi);
	float a = hi * mhalf;
	bool inRange = a >= lowest;
	if (!(a > lowest)) a = lowest;
	float n = rintf(a * log2e);
	float r = fmaf(-n, ln2hi, a);
	r = fmaf(-n, ln2lo, r);
	float p = ex[0];
	for (int j = 1; j < 6; j++) p = fmaf(p, r, ex[j]);
	p = fmaf(p, r, one);
	p = fmaf(p, r, one); // e^r
	int ni = n == n ? (int)n : (int)0x80000000;
	float pow2 = __int_as_float((int)((unsigned)(ni + 127) << 23));
	float e = p * pow2;
	e = fmaf(-e, lo * half, e); // e^(-hi/2) (1 - lo/2)
	if (!inRange) e = 0.0f;
	float u = one / fmaf(mk, t, one);
	float s = S[9];
	for (int j = 8; j >= 0; j--) s = fmaf(s, u, S[j]);
	float q = s * u * e; // Phi(-|x|)
	float phi = __float_as_int(xv) < 0 ? q : one - q;
	if (d) *d = fmaf(xv * e, invSqrt2Pi, phi);
	return xv * phi;
}
#undef F
